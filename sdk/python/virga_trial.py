"""The Python side of Virga's trial protocol (standard library only, Python >= 3.9).

A trial is any command Virga starts with a few ``VIRGA_*`` environment variables
(docs/architecture.md, "The trial protocol"). This module reads them, exposes
the hyperparameters and the checkpoint directory, reports metrics to the server
(retrying while the server restarts) and turns SIGTERM into a flag a training
loop can poll::

    import virga_trial

    trial = virga_trial.from_env()
    lr = trial.get("lr", 0.1)
    start = load_checkpoint(trial.checkpoint_dir)          # your code
    for epoch in range(start + 1, epochs + 1):
        ...                                                # train, polling trial.stopping
        if trial.stopping:
            sys.exit(virga_trial.STOPPED_EXIT_CODE)
        save_checkpoint(trial.checkpoint_dir, epoch)       # write first,
        if trial.report(epoch, {"val_loss": loss}) == virga_trial.STOP:  # then report
            break

Run by hand (no ``VIRGA_REPORT_URL``), ``report`` is a no-op returning
``"continue"``, the hyperparameters are empty and the checkpoint directory is
the trainer's choice (``from_env(default_checkpoint_dir=...)``) or a new
temporary directory.

The module never exits the process, writes checkpoints or reads other files:
those are the trainer's decisions.

A trainer whose model should go to Virga's model registry (``virga models
register``) also writes it, with each checkpoint and before the report, as a
model directory in ``model/`` of the checkpoint directory: the model file and
a ``virga-model.json`` naming its format, file and signature (docs/models.md;
examples/digits-torch exports ONNX this way).
"""

from __future__ import annotations

import http.client
import json
import math
import os
import signal
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, Mapping, Optional

__all__ = [
    "CONTINUE",
    "STOP",
    "STOPPED_EXIT_CODE",
    "ReportError",
    "ReportRejected",
    "ReportNotAcknowledged",
    "Superseded",
    "Trial",
    "from_env",
]

#: The server's decisions, as ``Trial.report`` returns them.
CONTINUE = "continue"
STOP = "stop"

#: The exit code for a trainer that exits because of SIGTERM (128 + 15).
#: Exiting 0 would tell Virga that the trial completed.
STOPPED_EXIT_CODE = 143

ENV_EXPERIMENT_ID = "VIRGA_EXPERIMENT_ID"
ENV_TRIAL_ID = "VIRGA_TRIAL_ID"
ENV_ATTEMPT_ID = "VIRGA_ATTEMPT_ID"
ENV_HPARAMS = "VIRGA_HPARAMS"
ENV_CHECKPOINT_DIR = "VIRGA_CHECKPOINT_DIR"
ENV_REPORT_URL = "VIRGA_REPORT_URL"
ENV_TOKEN = "VIRGA_TOKEN"

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class ReportError(Exception):
    """Base class of the errors ``Trial.report`` raises about the server's answer."""


class Superseded(ReportError):
    """The server answered 409: this attempt is no longer the trial's current one
    (it was stopped, or restarted elsewhere). The process should exit."""


class ReportRejected(ReportError):
    """The server refused the report for good (a 4xx other than 409, usually 400
    for a malformed report). ``status`` is the HTTP status, ``message`` the
    server's explanation."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"server refused report ({status}): {message}")
        self.status = status
        self.message = message


class ReportNotAcknowledged(ReportError):
    """The report could not be delivered within the retry budget (connection
    errors, timeouts or 5xx replies throughout)."""


class _Signals:
    """Process-wide SIGTERM/SIGINT state shared by every Trial.

    The handler is installed by ``from_env`` (signals can only be handled from
    the main thread). It only takes over once a trainer has read
    ``Trial.stopping``: until then a signal gets its previous behaviour (SIGTERM
    kills, SIGINT raises KeyboardInterrupt), so a trainer that never polls the
    flag is not left ignoring SIGTERM until Virga's SIGKILL. After the first
    signal the previous handlers are restored, so a second signal acts as usual.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.installed = False
        self.watched = False
        self.stopping = False
        self.previous: Dict[int, Any] = {}

    def install(self) -> bool:
        with self.lock:
            if self.installed:
                return True
            if threading.current_thread() is not threading.main_thread():
                return False
            for sig in _STOP_SIGNALS:
                self.previous[sig] = signal.signal(sig, self._handle)
            self.installed = True
            return True

    def _restore(self) -> None:
        for sig, prev in self.previous.items():
            signal.signal(sig, prev if prev is not None else signal.SIG_DFL)

    def _handle(self, signum: int, frame: Any) -> None:
        self._restore()
        if self.watched:
            self.stopping = True
            return
        # Nobody polls the flag: behave as if we had never been installed.
        prev = self.previous.get(signum)
        if callable(prev):
            prev(signum, frame)
        elif prev != signal.SIG_IGN:
            os.kill(os.getpid(), signum)


_signals = _Signals()


class Trial:
    """One attempt of a Virga trial, as seen from inside the process.

    Build one with ``from_env()``; the constructor is for tests and embedders.
    """

    def __init__(
        self,
        *,
        hparams: Optional[Mapping[str, Any]] = None,
        checkpoint_dir: Optional[str] = None,
        report_url: Optional[str] = None,
        token: Optional[str] = None,
        experiment_id: int = 0,
        trial_id: int = 0,
        attempt_id: int = 0,
        default_checkpoint_dir: Optional[str] = None,
        retry_initial: float = 0.1,
        retry_max: float = 2.0,
        retry_total: float = 600.0,
        request_timeout: float = 300.0,
        rank: int = 0,
    ) -> None:
        """Create a Trial. ``report_url`` empty or None means no server (a hand run).

        Unacknowledged reports are retried after ``retry_initial`` seconds,
        doubling up to ``retry_max``, for ``retry_total`` seconds in all (10
        minutes by default: long enough for the server to restart). One HTTP
        exchange may take ``request_timeout`` seconds (the server saves the
        checkpoint directory before it answers).
        """
        if report_url and not report_url.startswith(("http://", "https://")):
            raise ValueError(f"report URL {report_url!r}: want an http:// or https:// URL")
        self._hparams: Dict[str, Any] = dict(hparams or {})
        self._checkpoint_dir = checkpoint_dir or None
        self._default_checkpoint_dir = default_checkpoint_dir or None
        self._resolved_checkpoint_dir: Optional[str] = None
        self.report_url = report_url or None
        self.token = token or None
        self.experiment_id = experiment_id
        self.trial_id = trial_id
        self.attempt_id = attempt_id
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.retry_total = retry_total
        self.request_timeout = request_timeout
        self._superseded = False
        self._rank = rank
        self._lock = threading.Lock()
        self._sleep: Callable[[float], None] = time.sleep

    def __repr__(self) -> str:
        return (f"Trial(trial_id={self.trial_id}, attempt_id={self.attempt_id}, "
                f"managed={self.managed}, hparams={self._hparams!r})")

    @property
    def rank(self) -> int:
        """This process's rank in a trial of several processes (``RANK``), 0 otherwise."""
        return self._rank

    @property
    def managed(self) -> bool:
        """True when running under Virga (a report URL is set)."""
        return self.report_url is not None

    @property
    def hparams(self) -> Dict[str, Any]:
        """A copy of the hyperparameters (empty when running by hand)."""
        return dict(self._hparams)

    def get(self, name: str, default: Any = None) -> Any:
        """Return hyperparameter ``name``, converted to the type of ``default``.

        With an int default, 64.0 becomes 64 (a fractional value raises
        ValueError); with a float default, ints become floats; with a str
        default, numbers are formatted as the command line's placeholders are;
        numeric strings convert to numbers. Absent names give ``default``;
        values that cannot convert raise ValueError naming the hyperparameter.
        """
        if name not in self._hparams or self._hparams[name] is None:
            return default
        value = self._hparams[name]
        try:
            if default is None:
                return value
            if isinstance(default, bool):
                if isinstance(value, bool):
                    return value
                if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
                    return value.strip().lower() in ("true", "1")
                raise ValueError("want a boolean")
            if isinstance(default, int):
                if isinstance(value, bool):
                    raise ValueError("want an integer")
                f = float(value)
                if not f.is_integer():
                    raise ValueError("want an integer")
                return int(f)
            if isinstance(default, float):
                if isinstance(value, bool):
                    raise ValueError("want a number")
                return float(value)
            if isinstance(default, str):
                if isinstance(value, bool):
                    return "true" if value else "false"
                if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
                    return str(int(value))  # 64.0 -> "64", as in ${name} placeholders
                return str(value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"hyperparameter {name}={value!r}: {e}") from None
        return value

    def set_default_checkpoint_dir(self, directory: str) -> None:
        """Name the checkpoint directory to use when Virga gave none (a hand run,
        typically from a flag). Under Virga it has no effect: only
        ``VIRGA_CHECKPOINT_DIR`` is saved. Call it before reading ``checkpoint_dir``."""
        with self._lock:
            self._default_checkpoint_dir = directory or None

    @property
    def checkpoint_dir(self) -> str:
        """The directory to write checkpoints into and to resume from, created
        if needed: ``VIRGA_CHECKPOINT_DIR`` under Virga; otherwise the
        ``default_checkpoint_dir`` given to ``from_env`` or
        ``set_default_checkpoint_dir``; otherwise a new
        temporary directory. The answer never changes once given."""
        with self._lock:
            if self._resolved_checkpoint_dir is None:
                d = self._checkpoint_dir or self._default_checkpoint_dir
                if d is None:
                    d = tempfile.mkdtemp(prefix="virga-trial-")
                os.makedirs(d, exist_ok=True)
                self._resolved_checkpoint_dir = d
            return self._resolved_checkpoint_dir

    @property
    def stopping(self) -> bool:
        """True once the process received SIGTERM (or SIGINT): checkpoint and
        exit soon, with ``STOPPED_EXIT_CODE``. Reading it tells the handler the
        trainer is listening (see ``from_env``)."""
        if not _signals.installed:
            _signals.install()
        _signals.watched = True
        return _signals.stopping

    def report(self, step: int, metrics: Mapping[str, Any]) -> str:
        """Report the metrics of ``step`` and return the decision, ``CONTINUE`` or ``STOP``.

        Write the checkpoint first: the server saves the checkpoint directory
        before it answers. Reporting a step again replaces the earlier report,
        which makes retries safe. Metric values may be anything ``float()``
        accepts except strings (Python, NumPy and 0-d torch numbers).

        Raises ValueError for a negative step or a NaN/infinite metric,
        TypeError for a non-numeric one, ``Superseded`` on 409 (and on every
        later call), ``ReportRejected`` on another 4xx, and
        ``ReportNotAcknowledged`` when connection errors, timeouts or 5xx
        replies outlast the retry budget. Without a server it only checks its
        arguments and returns ``CONTINUE``.

        In a trial of several processes (``resources.nodes`` or
        ``processes_per_node``) only rank 0 reports: on the other ranks it
        checks its arguments and returns ``CONTINUE``; rank 0 tells them
        when to stop (e.g. with a collective operation).
        """
        if isinstance(step, bool) or int(step) != step or step < 0:
            raise ValueError(f"report step {step!r}: want an integer >= 0")
        clean: Dict[str, float] = {}
        for name, value in metrics.items():
            if isinstance(value, (str, bytes)):
                raise TypeError(f"metric {name!r} is {value!r}: want a number")
            v = float(value)
            if not math.isfinite(v):
                raise ValueError(f"report step {step}: metric {name!r} is {v}: want a finite number")
            clean[str(name)] = v
        if not self.managed or self.rank != 0:
            return CONTINUE
        if self._superseded:
            raise Superseded("attempt superseded (an earlier report got 409)")

        body = json.dumps({"step": int(step), "metrics": clean}, allow_nan=False).encode()
        start = time.monotonic()
        wait = self.retry_initial
        tries = 0
        while True:
            tries += 1
            try:
                return self._send(body)
            except _Retryable as e:
                last = e
            elapsed = time.monotonic() - start
            if self.retry_total < 0 or elapsed + wait > self.retry_total:
                raise ReportNotAcknowledged(
                    f"report step {step} not acknowledged after {tries} tries in {elapsed:.1f}s: {last}"
                ) from None
            self._sleep(wait)
            wait = min(2 * wait, self.retry_max)

    def _send(self, body: bytes) -> str:
        """One HTTP exchange; failures worth retrying raise _Retryable."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(self.report_url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.request_timeout) as resp:
                raw = resp.read(64 << 10)
        except urllib.error.HTTPError as e:
            try:
                msg = _server_message(e.read(64 << 10))
            except Exception:  # the body is only for the message
                msg = e.reason or ""
            if e.code == 409:
                self._superseded = True
                raise Superseded(f"attempt superseded: {msg}") from None
            if e.code >= 500 or e.code in (408, 429):
                raise _Retryable(f"server answered {e.code}: {msg}") from None
            raise ReportRejected(e.code, msg) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            # Refused or reset connections, timeouts, a server closing mid-reply.
            raise _Retryable(f"sending report: {getattr(e, 'reason', None) or e!r}") from None
        try:
            decision = json.loads(raw.decode("utf-8")).get("decision")
        except (ValueError, AttributeError):
            raise ReportError(f"reply {raw[:200]!r} is not a JSON object with a decision") from None
        if isinstance(decision, str) and decision.lower() in (CONTINUE, STOP):
            return decision.lower()
        raise ReportError(f"reply has decision {decision!r}: want 'continue' or 'stop'")


class _Retryable(Exception):
    """A report that was not acknowledged and may be sent again."""


def _server_message(raw: bytes) -> str:
    """A human message from an error body: the JSON "error" or "message" field, or the text."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        for key in ("error", "message", "detail"):
            if isinstance(obj.get(key), str) and obj[key]:
                return obj[key]
    return text[:1024] or "(empty body)"


def _env_int(environ: Mapping[str, str], name: str) -> int:
    s = environ.get(name, "").strip()
    if not s:
        return 0
    try:
        return int(s)
    except ValueError:
        raise ValueError(f"{name}={s!r}: want an integer") from None


def from_env(
    environ: Optional[Mapping[str, str]] = None,
    *,
    default_checkpoint_dir: Optional[str] = None,
    handle_signals: bool = True,
    **options: Any,
) -> Trial:
    """Return the Trial described by the ``VIRGA_*`` environment variables.

    Unset variables are fine (a trainer run by hand sets none); malformed ones
    raise ValueError naming the variable. ``default_checkpoint_dir`` is used
    when Virga gives none. ``options`` go to the Trial constructor (retry
    settings).

    With ``handle_signals`` (the default, and only from the main thread) it
    installs the SIGTERM/SIGINT handler behind ``Trial.stopping``; the handler
    leaves signals their usual effect until the trainer first reads
    ``trial.stopping``.
    """
    env = os.environ if environ is None else environ
    hparams: Dict[str, Any] = {}
    raw = env.get(ENV_HPARAMS, "").strip()
    if raw:
        try:
            hparams = json.loads(raw)
        except ValueError as e:
            raise ValueError(f"{ENV_HPARAMS}: want a JSON object: {e}") from None
        if not isinstance(hparams, dict):
            raise ValueError(f"{ENV_HPARAMS}={raw!r}: want a JSON object")
    trial = Trial(
        hparams=hparams,
        checkpoint_dir=env.get(ENV_CHECKPOINT_DIR) or None,
        report_url=env.get(ENV_REPORT_URL) or None,
        token=env.get(ENV_TOKEN) or None,
        experiment_id=_env_int(env, ENV_EXPERIMENT_ID),
        trial_id=_env_int(env, ENV_TRIAL_ID),
        attempt_id=_env_int(env, ENV_ATTEMPT_ID),
        rank=_env_int(env, "RANK"),
        default_checkpoint_dir=default_checkpoint_dir,
        **options,
    )
    if handle_signals:
        _signals.install()
    return trial
