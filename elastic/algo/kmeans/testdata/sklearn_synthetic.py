"""scikit-learn's KMeans on the synthetic stream of sklearn_synthetic_test.go.

usage: sklearn_synthetic.py K N_INIT TRAIN.csv TEST.csv

Both files are CSV of features only, no header. Fits KMeans(n_clusters=K,
n_init=N_INIT, random_state=0) on the training rows and prints JSON: the
inertia on the training rows and on the test rows (the sum of squared
distances to the nearest centre), the iterations and the seconds. Exits 3
with a message when scikit-learn is missing.
"""
import json
import sys
import time

try:
    import numpy as np
    from sklearn.cluster import KMeans
except ImportError as e:
    print("scikit-learn is missing (%s): apt-get install python3-sklearn" % e, file=sys.stderr)
    sys.exit(3)

k, n_init = int(sys.argv[1]), int(sys.argv[2])
train = np.loadtxt(sys.argv[3], delimiter=",", ndmin=2)
test = np.loadtxt(sys.argv[4], delimiter=",", ndmin=2)
t = time.time()
km = KMeans(n_clusters=k, n_init=n_init, random_state=0).fit(train)
print(json.dumps({
    "train_rows": len(train), "test_rows": len(test),
    "inertia_train": float(km.inertia_),
    "inertia_test": float(-km.score(test)),
    "n_iter": int(km.n_iter_),
    "seconds": time.time() - t,
}))
