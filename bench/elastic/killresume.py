"""The linear learner's test accuracy on the held-out digits after the kills of
cmd/virga's TestAlgoLearnersOnWorkerProcesses, against runs without them: a
coordinator (virga algo --serve) and two worker processes, 12 passes, batches
of 10; `kill` kills one worker (SIGKILL) at a fifth of the rows and starts it
again, then kills the coordinator at half (its workers stopped) and starts it
again from its checkpoint; `nokill` is the same processes left alone; `ref` is
one process of two goroutines (--workers 2), the test's reference.

    go build -o /tmp/virga ./cmd/virga
    /usr/bin/python3 bench/elastic/killresume.py /tmp/virga kill 20 --lease 10s

prints each run (accuracy, test log loss, the positions of both shards when
the coordinator was killed, the final rows) and the mean and standard
deviation of the accuracy. Run the modes interleaved or on an idle machine:
load changes the workers' interleaving."""
import argparse, gzip, json, os, signal, socket, statistics, subprocess, tempfile, time
import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("virga")
ap.add_argument("mode", choices=["ref", "nokill", "kill"])
ap.add_argument("runs", type=int)
ap.add_argument("--lease", default="10s", help="the coordinator's --lease")
ap.add_argument("--epochs", type=int, default=12)
a = ap.parse_args()

here = os.path.dirname(os.path.abspath(__file__))
rows = [l.strip().split(",") for l in gzip.open(os.path.join(here, "../../examples/data/digits.csv.gz"), "rt") if l.strip()]
A = np.array(rows, dtype=float)
X, Y = A[:, :64], A[:, 64]
train_i = [i for i in range(len(Y)) if i % 5 != 4]  # as the test's digitsSplit
Xte, Yte = X[[i for i in range(len(Y)) if i % 5 == 4]], Y[[i for i in range(len(Y)) if i % 5 == 4]]
work = tempfile.mkdtemp()
train = os.path.join(work, "train.csv")
with open(train, "w") as f:
    for i in train_i:
        f.write(",".join("%g" % v for v in X[i]) + ",%g\n" % Y[i])
total = len(train_i) * a.epochs
common = [a.virga, "algo", "linear-learner", "--param", "classes=10"]


def quality(path):
    t = json.load(open(path))["tensors"]
    w = np.array(t["weights"]["data"]).reshape(t["weights"]["shape"])
    z = ((Xte - np.array(t["mean"]["data"])) * np.array(t["scale"]["data"])) @ w.T + np.array(t["bias"]["data"])
    acc = float(np.mean(np.argmax(z, 1) == Yte))
    z -= z.max(1, keepdims=True)
    lp = z - np.log(np.exp(z).sum(1, keepdims=True))
    return acc, float(-np.mean(lp[np.arange(len(Yte)), Yte.astype(int)]))


def state(ck):
    try:
        return json.load(open(os.path.join(ck, "state.json")))["tensors"]
    except (OSError, ValueError):
        return None


def positions(st):
    return [int(st.get("shard/%d/pos" % k, [0, 0, 0])[1]) for k in range(2)]


def run():
    d = tempfile.mkdtemp(dir=work)
    model = os.path.join(d, "model.json")
    if a.mode == "ref":
        subprocess.run(common + ["--epochs", str(a.epochs), "--input", train, "--label", "last", "--workers", "2", "--batch", "10", "--model", model], check=True, capture_output=True)
        return quality(model) + ({},)
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    ck = os.path.join(d, "ckpt")
    coordinator = lambda: subprocess.Popen(common + ["--epochs", str(a.epochs), "--param", "features=64", "--serve", "127.0.0.1:%d" % port, "--shards", "2",
                                                     "--checkpoint", ck, "--checkpoint-every", "10ms", "--lease", a.lease, "--model", model], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = lambda k: subprocess.Popen(common + ["--join", "http://127.0.0.1:%d" % port, "--input", train, "--label", "last", "--shard", str(k), "--shards", "2", "--batch", "10"], stderr=subprocess.DEVNULL)

    def wait_rows(least):
        end = time.time() + 60
        while True:
            st = state(ck)
            if st and sum(positions(st)) >= least:
                return
            if time.time() > end:
                raise SystemExit("the checkpoint did not reach %d rows" % least)
            time.sleep(0.002)

    c, w = coordinator(), [worker(0), worker(1)]
    seen = {}
    if a.mode == "kill":
        wait_rows(total // 5)
        w[1].send_signal(signal.SIGKILL); w[1].wait(); w[1] = worker(1)
        wait_rows(total // 2)
        for p in w:
            p.send_signal(signal.SIGSTOP)
        c.send_signal(signal.SIGKILL); c.wait()
        seen["positions at the coordinator's kill"] = positions(state(ck))
        c = coordinator()
        for p in w:
            p.send_signal(signal.SIGCONT)
    for p in w + [c]:
        if p.wait() != 0:
            raise SystemExit("a process failed")
    seen["final rows"] = positions(state(ck))
    return quality(model) + (seen,)


accs = []
for _ in range(a.runs):
    acc, loss, seen = run()
    accs.append(acc)
    print("%s accuracy %.4f log loss %.4f %s" % (a.mode, acc, loss, seen), flush=True)
if len(accs) > 1:
    what = a.mode if a.mode == "ref" else "%s, lease %s" % (a.mode, a.lease)
    print("%s: accuracy %.4f ± %.4f over %d runs" % (what, statistics.mean(accs), statistics.stdev(accs), len(accs)))
