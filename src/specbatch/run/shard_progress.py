"""A shard's progress while it generates: a bar in a terminal, a plain line every ``progress.interval_seconds``
otherwise, and the same figures handed to the run's observers (MLflow draws them as a live curve) at that period.

What it counts (the streaming loop tells it, specbatch.run.streaming):
- rows of the shard done: every turn of every sample of the row answered or failed (its chunk may still wait for
  other rows before its Parquet part is written). Rows of chunks an earlier launch wrote count from the start, so a
  resumed shard carries on from where it was; samples (``sampling.n`` per row) likewise.
- output tokens and acceptance of this launch, from its finished requests' own figures: tok/s over the seconds since
  generation began (the engine's start excluded) and AL = 1 + accepted / drafts (vLLM's definition,
  specbatch.engine.spec_metrics); no AL when nothing was drafted (spec=none) or the engine did not count its drafts.
- ETA: the rows left at this launch's pace of rows so far; none before the first row is done, and none when the
  shard's row count is not known.

Showing it costs the loop one clock read per engine step; the bar redraws at most twice a second, the lines and the
reports come once per interval. A report that fails is logged once and never stops the job.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TextIO

from specbatch.config import ProgressConfig, ProgressDisplay
from specbatch.engine.spec_metrics import Counters, acceptance_length

log = logging.getLogger(__name__)

# Seconds between two redraws of the bar: often enough to look alive, rarely enough to cost nothing.
BAR_REDRAW_SECONDS = 0.5
# The bar's size on a terminal that does not say its own (a pty nobody sized): tqdm would draw nothing at all.
UNSIZED = {"ncols": 120, "nrows": 24}


@dataclass(frozen=True)
class Progress:
    """The shard's figures at one moment (see the module docstring for what each counts)."""

    rows_done: int
    # None: the shard's row count is not known (then neither is the ETA).
    rows_total: int | None
    samples_done: int
    samples_total: int | None
    # Rows done by this launch, and the seconds since its generation began: its pace.
    rows_this_launch: int
    seconds: float
    output_tokens: int
    # None: nothing was drafted (or the engine did not count its drafting steps).
    acceptance_length: float | None

    @property
    def tokens_per_second(self) -> float:
        return self.output_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def eta_seconds(self) -> float | None:
        """Seconds left at this launch's pace of rows; None before a row is done or without the shard's row count."""
        if self.rows_total is None or not self.rows_this_launch or self.seconds <= 0:
            return None
        return max(0, self.rows_total - self.rows_done) * self.seconds / self.rows_this_launch

    def describe(self) -> str:
        """One line of the figures, as a Slurm log shows them."""
        if self.rows_total is None:
            done = f"{self.rows_done} rows, {self.samples_done} samples (the shard's row count is not known: no ETA)"
        else:
            share = self.rows_done / self.rows_total if self.rows_total else 1.0
            done = f"{self.rows_done}/{self.rows_total} rows ({share:.0%}), "
            done += f"{self.samples_done}/{self.samples_total} samples"
        parts = [done, f"{self.tokens_per_second:.1f} output tok/s"]
        if self.acceptance_length is not None:
            parts.append(f"AL {self.acceptance_length:.2f}")
        eta = self.eta_seconds
        if self.rows_total is not None:
            parts.append(f"ETA {_duration(eta)}" if eta is not None else "ETA unknown until a row is done")
        return ", ".join(parts)


def _duration(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds)))


class ShardProgress:
    """The progress of one shard's generation, across every stream of it (spec=auto runs several); ``close`` ends it.

    ``rows_before`` of the shard's ``rows_total`` were done by earlier launches; each row has ``samples_per_row``
    samples. ``report`` receives the figures every interval and once at the end (the run's observers). The bar, when
    there is one, goes to ``stream`` (the job's stderr); ``clock`` is for tests."""

    def __init__(
        self,
        cfg: ProgressConfig,
        name: str,
        rows_total: int | None,
        rows_before: int,
        samples_per_row: int,
        report: Callable[[Progress], None] | None = None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.cfg, self.name = cfg, name
        self._rows_total, self._rows_before, self._per_row = rows_total, rows_before, samples_per_row
        self._rows, self._samples = rows_before, rows_before * samples_per_row
        self._tokens = self._drafts = self._accepted = 0
        self._report, self._clock = report, clock
        self._began = self._reported = self._drawn = clock()
        # What the last report said (rows, samples, tokens): the end reports only what it did not.
        self._last: tuple[int, int, int] | None = None
        self._report_failed = False
        self._open = contextlib.ExitStack()
        stream = stream or sys.stderr
        self._bar: Any = self._open_bar(stream) if self._wants_bar(stream) else None

    def _wants_bar(self, stream: TextIO) -> bool:
        if self.cfg.display is ProgressDisplay.auto:
            isatty = getattr(stream, "isatty", None)
            return bool(isatty and isatty())
        return self.cfg.display is ProgressDisplay.bar

    def _open_bar(self, stream: TextIO) -> Any:
        # Imported here: a job whose output is no terminal never draws one.
        from tqdm import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm

        known = self._rows_total is not None
        bar_format = (
            "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} rows{postfix} [{elapsed}, ETA {remaining}]"
            if known
            else "{desc}: {n_fmt} rows{postfix} [{elapsed}, no ETA: the shard's row count is not known]"
        )
        # smoothing=0: the ETA at the launch's average pace, as the lines and MLflow give it; miniters=1 and
        # mininterval=0: it redraws when told, and tick() tells it at most every BAR_REDRAW_SECONDS.
        bar = self._open.enter_context(
            tqdm(
                total=self._rows_total,
                initial=self._rows_before,
                desc=self.name,
                postfix=_postfix(self.figures()),
                file=stream,
                bar_format=bar_format,
                **({"dynamic_ncols": True} if _columns(stream) else UNSIZED),
                smoothing=0,
                miniters=1,
                mininterval=0,
            )
        )
        # Log lines printed while the bar is shown go above it (through tqdm.write) instead of through it.
        if any(_is_console(handler) for handler in logging.getLogger().handlers):
            self._open.enter_context(logging_redirect_tqdm())
        return bar

    # --- what the streaming loop tells it ---

    def answered(self, counters: Counters) -> None:
        """A request finished with these figures (its output tokens, drafts and accepted tokens)."""
        self._tokens += counters.generation_tokens
        self._drafts += counters.drafts
        self._accepted += counters.accepted_tokens

    def finished(self, samples: int, row: bool) -> None:
        """``samples`` samples are done (their last turn answered, or failed); ``row``: with them their row."""
        self._samples += samples
        self._rows += row

    def restate(self, rows: int, samples: int, counters: Counters) -> None:
        """This launch's rows, samples and figures so far as a whole, for a caller that learns them in sums rather
        than request by request (a Ray launch, from its replicas' reports); ``tick`` then shows them."""
        self._rows = self._rows_before + rows
        self._samples = self._rows_before * self._per_row + samples
        self._tokens, self._drafts = counters.generation_tokens, counters.drafts
        self._accepted = counters.accepted_tokens

    def tick(self, in_engine: int = 0, open_chunks: int = 0) -> None:
        """After each engine step: redraw the bar, and once per interval log a line (no bar) and report."""
        now = self._clock()
        if self._bar is not None and now - self._drawn >= BAR_REDRAW_SECONDS:
            self._drawn = now
            self._draw(self.figures(now))
        if now - self._reported >= self.cfg.interval_seconds:
            self._reported = now
            figures = self.figures(now)
            if self._bar is None:
                log.info(
                    "progress %s: %s (%d requests running or queued, %d chunks open)",
                    self.name,
                    figures.describe(),
                    in_engine,
                    open_chunks,
                )
            self._send(figures)

    def close(self) -> None:
        """The generation ended (done, stopped or failed): the bar shows where it ended, and the observers get the
        last figures they have not seen."""
        figures = self.figures()
        # Called on the way out of a failed stream too, whose error is the one to see: the bar's own is only logged.
        try:
            if self._bar is not None:
                self._draw(figures)
        except Exception:  # noqa: BLE001
            log.debug("the progress bar's last draw failed", exc_info=True)
        finally:
            try:
                self._open.close()  # the log handlers as they were, and the bar's line ended
            except Exception:  # noqa: BLE001
                log.debug("closing the progress bar failed", exc_info=True)
        if (figures.rows_done, figures.samples_done, figures.output_tokens) != self._last:
            self._send(figures)

    # --- figures ---

    def figures(self, now: float | None = None) -> Progress:
        seconds = (self._clock() if now is None else now) - self._began
        total = self._rows_total
        return Progress(
            rows_done=self._rows,
            rows_total=total,
            samples_done=self._samples,
            samples_total=None if total is None else total * self._per_row,
            rows_this_launch=self._rows - self._rows_before,
            seconds=seconds,
            output_tokens=self._tokens,
            acceptance_length=acceptance_length(self._accepted, self._drafts) if self._drafts else None,
        )

    def _draw(self, figures: Progress) -> None:
        bar = self._bar
        bar.set_postfix_str(_postfix(figures), refresh=False)
        if figures.rows_done != bar.n:
            bar.update(figures.rows_done - bar.n)  # redraws
        else:
            bar.refresh()

    def _send(self, figures: Progress) -> None:
        self._last = (figures.rows_done, figures.samples_done, figures.output_tokens)
        if self._report is None:
            return
        try:
            self._report(figures)
        except Exception as exc:  # noqa: BLE001 - progress is for people watching; the job goes on without it
            if not self._report_failed:
                self._report_failed = True
                log.warning("could not report the shard's progress (%s: %s); the job goes on", type(exc).__name__, exc)


def _postfix(figures: Progress) -> str:
    """What the bar shows after its rows (tqdm puts it after ", ")."""
    postfix = f"{figures.samples_done}/{figures.samples_total or '?'} samples"
    postfix += f", {figures.tokens_per_second:.1f} tok/s"
    if figures.acceptance_length is not None:
        postfix += f", AL {figures.acceptance_length:.2f}"
    return postfix


def _columns(stream: TextIO) -> int:
    """The width of the terminal ``stream`` writes to; 0 when it does not say."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0


def _is_console(handler: logging.Handler) -> bool:
    """A handler that prints on the job's console (the one the bar shares), as tqdm's redirect tells them apart."""
    return isinstance(handler, logging.StreamHandler) and handler.stream in (sys.stdout, sys.stderr)
