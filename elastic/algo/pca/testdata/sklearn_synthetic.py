"""scikit-learn's PCA on the synthetic stream of sklearn_synthetic_test.go.

usage: sklearn_synthetic.py K TRAIN.csv TEST.csv

Both files are CSV of features only, no header. Fits PCA(n_components=K)
on the training rows and prints JSON: the explained variance and its ratio
per component, the components (K rows of D), and on the test rows the
variance of the projection on each component and the test rows' total
variance (both with the n-1 denominator). Exits 3 with a message
when scikit-learn is missing.
"""
import json
import sys
import time

try:
    import numpy as np
    from sklearn.decomposition import PCA
except ImportError as e:
    print("scikit-learn is missing (%s): apt-get install python3-sklearn" % e, file=sys.stderr)
    sys.exit(3)

k = int(sys.argv[1])
train = np.loadtxt(sys.argv[2], delimiter=",", ndmin=2)
test = np.loadtxt(sys.argv[3], delimiter=",", ndmin=2)
t = time.time()
p = PCA(n_components=k, svd_solver="full").fit(train)
proj = p.transform(test)
print(json.dumps({
    "train_rows": len(train), "test_rows": len(test),
    "explained_variance": p.explained_variance_.tolist(),
    "explained_variance_ratio": p.explained_variance_ratio_.tolist(),
    "components": p.components_.ravel().tolist(),
    "test_variance": proj.var(axis=0, ddof=1).tolist(),
    "test_total_variance": float(test.var(axis=0, ddof=1).sum()),
    "seconds": time.time() - t,
}))
