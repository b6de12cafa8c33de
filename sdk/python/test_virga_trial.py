"""Tests of virga_trial against a stdlib HTTP server in a thread.

Run from the repository root: python3 -m unittest discover -s sdk/python
"""

from __future__ import annotations

import http.server
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import virga_trial  # noqa: E402

FAST = dict(retry_initial=0.001, retry_max=0.004, retry_total=5.0, request_timeout=2.0)


class FakeServer:
    """Answers reports with scripted (status, body) replies in order, the last
    one repeating, and records every request."""

    def __init__(self, *replies, port=0):
        self.replies = list(replies)
        self.requests = []
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n) or b"null")
                with outer.lock:
                    outer.requests.append({
                        "path": self.path,
                        "auth": self.headers.get("Authorization"),
                        "content_type": self.headers.get("Content-Type"),
                        "body": body,
                    })
                    status, text = outer.replies[min(len(outer.requests), len(outer.replies)) - 1]
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = "http://127.0.0.1:%d/api/v1/attempts/7/report" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class ReportTest(unittest.TestCase):
    def serve(self, *replies):
        srv = FakeServer(*replies)
        self.addCleanup(srv.close)
        trial = virga_trial.Trial(report_url=srv.url, token="tok-7", attempt_id=7, **FAST)
        return srv, trial

    def test_request_shape(self):
        srv, trial = self.serve((200, '{"decision":"continue"}'))
        self.assertEqual(trial.report(3, {"val_loss": 0.25, "val_accuracy": 0.9}), virga_trial.CONTINUE)
        self.assertEqual(len(srv.requests), 1)
        r = srv.requests[0]
        self.assertEqual(r["path"], "/api/v1/attempts/7/report")
        self.assertEqual(r["auth"], "Bearer tok-7")
        self.assertEqual(r["content_type"], "application/json")
        self.assertEqual(r["body"], {"step": 3, "metrics": {"val_loss": 0.25, "val_accuracy": 0.9}})

    def test_stop_decision(self):
        _, trial = self.serve((200, '{"decision":"stop"}'))
        self.assertEqual(trial.report(1, {"loss": 1}), virga_trial.STOP)

    def test_bad_replies(self):
        for body in ('{"decision":"explode"}', "ok", "[]"):
            with self.subTest(body=body):
                _, trial = self.serve((200, body))
                with self.assertRaises(virga_trial.ReportError):
                    trial.report(1, {"loss": 1})

    def test_retries_5xx_then_succeeds(self):
        srv, trial = self.serve((503, '{"error":"restarting"}'), (502, "bad gateway"), (500, ""),
                                (200, '{"decision":"stop"}'))
        self.assertEqual(trial.report(5, {"loss": 0.5}), virga_trial.STOP)
        self.assertEqual(len(srv.requests), 4)
        self.assertTrue(all(r["body"]["step"] == 5 for r in srv.requests))

    def test_backoff_doubles_up_to_cap(self):
        srv, trial = self.serve((503, ""), (503, ""), (503, ""), (503, ""), (200, '{"decision":"continue"}'))
        trial.retry_initial, trial.retry_max = 0.1, 0.25
        waits = []
        trial._sleep = waits.append
        trial.report(1, {"loss": 1})
        self.assertEqual(waits, [0.1, 0.2, 0.25, 0.25])

    def test_retries_connection_errors_until_server_comes_up(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        trial = virga_trial.Trial(report_url="http://127.0.0.1:%d/r" % port, **FAST)
        started = []

        def start_later():
            time.sleep(0.1)
            srv = FakeServer((200, '{"decision":"continue"}'), port=port)
            started.append(srv)

        t = threading.Thread(target=start_later)
        t.start()
        try:
            self.assertEqual(trial.report(1, {"loss": 1}), virga_trial.CONTINUE)
        finally:
            t.join()
            for srv in started:
                srv.close()
        self.assertEqual(len(started[0].requests), 1)

    def test_gives_up_after_total(self):
        srv, trial = self.serve((503, '{"error":"still restarting"}'))
        trial.retry_total = 0.05
        t0 = time.monotonic()
        with self.assertRaises(virga_trial.ReportNotAcknowledged) as cm:
            trial.report(1, {"loss": 1})
        self.assertIn("still restarting", str(cm.exception))
        self.assertLess(time.monotonic() - t0, 2.0)
        self.assertGreaterEqual(len(srv.requests), 3)

    def test_superseded(self):
        srv, trial = self.serve((409, '{"error":"attempt 7 is not current"}'))
        with self.assertRaises(virga_trial.Superseded):
            trial.report(2, {"loss": 1})
        with self.assertRaises(virga_trial.Superseded):
            trial.report(3, {"loss": 1})
        self.assertEqual(len(srv.requests), 1, "no retry after 409, and no request after it")

    def test_bad_request(self):
        srv, trial = self.serve((400, '{"error":"metric x: want a number"}'))
        with self.assertRaises(virga_trial.ReportRejected) as cm:
            trial.report(1, {"x": 1})
        self.assertEqual(cm.exception.status, 400)
        self.assertEqual(cm.exception.message, "metric x: want a number")
        self.assertEqual(len(srv.requests), 1)

    def test_argument_checks(self):
        srv, trial = self.serve((200, '{"decision":"continue"}'))
        for bad in (math.nan, math.inf, -math.inf):
            with self.assertRaises(ValueError):
                trial.report(1, {"val_loss": bad})
        with self.assertRaises(TypeError):
            trial.report(1, {"val_loss": "0.5"})
        with self.assertRaises(ValueError):
            trial.report(-1, {"loss": 1})
        self.assertEqual(srv.requests, [])


class EnvTest(unittest.TestCase):
    def test_only_rank_zero_reports(self):
        # Port 9 (discard) refuses connections: a report that was sent would
        # raise after its (zero) retry budget; rank 1's is not sent at all.
        env = {"VIRGA_REPORT_URL": "http://127.0.0.1:9/api/v1/attempts/1/report", "RANK": "1"}
        trial = virga_trial.from_env(env, handle_signals=False, retry_total=0)
        self.assertEqual(trial.rank, 1)
        self.assertEqual(trial.report(0, {"loss": 1.0}), virga_trial.CONTINUE)
        with self.assertRaises(ValueError):
            trial.report(-1, {"loss": 1.0})
        env["RANK"] = "0"
        chief = virga_trial.from_env(env, handle_signals=False, retry_total=0)
        with self.assertRaises(virga_trial.ReportNotAcknowledged):
            chief.report(0, {"loss": 1.0})

    def test_from_env(self):
        ckpt = tempfile.mkdtemp()
        self.addCleanup(os.rmdir, ckpt)
        trial = virga_trial.from_env({
            "VIRGA_EXPERIMENT_ID": "3", "VIRGA_TRIAL_ID": "14", "VIRGA_ATTEMPT_ID": "15",
            "VIRGA_HPARAMS": '{"lr":0.05,"hidden":64,"l2":"1e-4","act":"relu","flag":true,"frac":2.5}',
            "VIRGA_CHECKPOINT_DIR": ckpt,
            "VIRGA_REPORT_URL": "http://127.0.0.1:9/api/v1/attempts/15/report",
            "VIRGA_TOKEN": "secret",
        }, handle_signals=False)
        self.assertTrue(trial.managed)
        self.assertEqual((trial.experiment_id, trial.trial_id, trial.attempt_id), (3, 14, 15))
        self.assertEqual(trial.checkpoint_dir, ckpt)
        self.assertEqual(trial.token, "secret")
        self.assertEqual(trial.hparams["lr"], 0.05)
        self.assertEqual(trial.get("lr", 1.0), 0.05)
        self.assertEqual(trial.get("l2", 1.0), 1e-4)
        self.assertEqual(trial.get("hidden", 1), 64)
        self.assertIsInstance(trial.get("hidden", 1), int)
        self.assertEqual(trial.get("hidden", 1.0), 64.0)
        self.assertEqual(trial.get("act", ""), "relu")
        self.assertEqual(trial.get("lr", ""), "0.05")
        self.assertEqual(trial.get("flag", ""), "true")
        self.assertIs(trial.get("flag", False), True)
        self.assertEqual(trial.get("missing", 7), 7)
        with self.assertRaisesRegex(ValueError, "frac"):
            trial.get("frac", 1)
        with self.assertRaisesRegex(ValueError, "act"):
            trial.get("act", 1.0)
        hp = trial.hparams
        hp["lr"] = 99
        self.assertEqual(trial.hparams["lr"], 0.05, "hparams must return a copy")

    def test_from_env_errors(self):
        for env, word in (
            ({"VIRGA_TRIAL_ID": "fourteen"}, "VIRGA_TRIAL_ID"),
            ({"VIRGA_HPARAMS": "{lr: 1}"}, "VIRGA_HPARAMS"),
            ({"VIRGA_HPARAMS": "[1, 2]"}, "VIRGA_HPARAMS"),
            ({"VIRGA_REPORT_URL": "localhost:8080/report"}, "http://"),
        ):
            with self.subTest(env=env):
                with self.assertRaisesRegex(ValueError, word):
                    virga_trial.from_env(env, handle_signals=False)

    def test_hand_run(self):
        trial = virga_trial.from_env({}, handle_signals=False)
        self.assertFalse(trial.managed)
        self.assertEqual(trial.hparams, {})
        self.assertEqual(trial.report(1, {"loss": 1.0}), virga_trial.CONTINUE)
        d = trial.checkpoint_dir
        self.addCleanup(os.rmdir, d)
        self.assertTrue(os.path.isdir(d))
        self.assertEqual(trial.checkpoint_dir, d, "the directory must not change")

    def test_checkpoint_dir_precedence(self):
        base = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, base)
        mine = os.path.join(base, "mine")
        theirs = os.path.join(base, "virga")
        by_hand = virga_trial.from_env({}, default_checkpoint_dir=mine, handle_signals=False)
        self.assertEqual(by_hand.checkpoint_dir, mine)
        self.assertTrue(os.path.isdir(mine))
        managed = virga_trial.from_env({"VIRGA_CHECKPOINT_DIR": theirs}, default_checkpoint_dir=mine,
                                       handle_signals=False)
        self.assertEqual(managed.checkpoint_dir, theirs)
        later = virga_trial.from_env({}, handle_signals=False)
        later.set_default_checkpoint_dir(mine)
        self.assertEqual(later.checkpoint_dir, mine)


SIGNAL_SCRIPT = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    import virga_trial
    trial = virga_trial.from_env({})
    watch = sys.argv[2] == "watch"
    print("ready", flush=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if watch and trial.stopping:
            print("stopping", flush=True)
            sys.exit(virga_trial.STOPPED_EXIT_CODE)
        time.sleep(0.01)
    sys.exit(5)
""")


class SignalTest(unittest.TestCase):
    def run_and_term(self, mode):
        p = subprocess.Popen([sys.executable, "-c", SIGNAL_SCRIPT, os.path.dirname(os.path.abspath(__file__)), mode],
                             stdout=subprocess.PIPE, text=True)
        self.assertEqual(p.stdout.readline().strip(), "ready")
        time.sleep(0.05)  # let the loop read trial.stopping once
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=10)
        return p.returncode, out

    def test_sigterm_sets_stopping_when_watched(self):
        code, out = self.run_and_term("watch")
        self.assertEqual(code, virga_trial.STOPPED_EXIT_CODE)
        self.assertIn("stopping", out)

    def test_sigterm_still_kills_a_trainer_that_never_watches(self):
        code, _ = self.run_and_term("ignore")
        self.assertEqual(code, -signal.SIGTERM)


if __name__ == "__main__":
    unittest.main()
