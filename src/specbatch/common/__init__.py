"""Small pieces every package uses: secret masking, SIGTERM handling, the runtime environment."""
