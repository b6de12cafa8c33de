"""scikit-learn's SGDClassifier.partial_fit on the benchmark's data: reads
rows x cols float64 features and rows float64 labels (raw little-endian) and
prints JSON rows per second of the fit loop for one model and for a grid of
models each fed every batch (what the linear learner's grid does); the
fastest of `repeat` runs."""
import json, sys, time
import numpy as np
from sklearn.linear_model import SGDClassifier

xpath, ypath, rows, cols, batch, models, repeat = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:8])
x = np.fromfile(xpath, dtype="<f8").reshape(rows, cols)
y = np.fromfile(ypath, dtype="<f8")
classes = np.array([0.0, 1.0])

def run(n_models, limit):
    clfs = [SGDClassifier(loss="log_loss", alpha=1e-4 * (i + 1), learning_rate="invscaling", eta0=0.1) for i in range(n_models)]
    t0 = time.perf_counter()
    done = 0
    for lo in range(0, limit, batch):
        xb, yb = x[lo:lo + batch], y[lo:lo + batch]
        for c in clfs:
            c.partial_fit(xb, yb, classes=classes)
        done += len(yb)
    return done / (time.perf_counter() - t0)

out = {"one_model_rows_per_s": max(run(1, rows) for _ in range(repeat)),
       "grid_rows_per_s": max(run(models, min(rows, 200_000)) for _ in range(repeat))}
print(json.dumps(out))
