"""scikit-learn on a synthetic stream of sklearn_synthetic_test.go.

usage: sklearn_synthetic.py binary|multiclass|regression TRAIN.csv TEST.csv

Both files are CSV without a header, the label in the last column. The
features are standardised on the training rows (as Virga's learner does
from its stream), then, for the classifiers, LogisticRegression (lbfgs, to
convergence) and SGDClassifier(loss="log_loss") in one pass of partial_fit
over the training rows in order; for regression, LinearRegression and
SGDRegressor in one pass of partial_fit. Prints JSON: the row counts and,
under "models", per model the test log loss and accuracy (classifiers) or
mean squared error (regression), and the seconds it took. Exits 3 with a message when scikit-learn is missing.
"""
import json
import sys
import time

try:
    import numpy as np
    from sklearn.linear_model import LinearRegression, LogisticRegression, SGDClassifier, SGDRegressor
    from sklearn.metrics import log_loss
    from sklearn.preprocessing import StandardScaler
except ImportError as e:
    print("scikit-learn is missing (%s): apt-get install python3-sklearn" % e, file=sys.stderr)
    sys.exit(3)

CHUNK = 1000  # rows per partial_fit call: one pass over the stream in order

kind, train_path, test_path = sys.argv[1:4]
train = np.loadtxt(train_path, delimiter=",", ndmin=2)
test = np.loadtxt(test_path, delimiter=",", ndmin=2)
xtr, ytr = train[:, :-1], train[:, -1]
xte, yte = test[:, :-1], test[:, -1]
sc = StandardScaler().fit(xtr)
xtr, xte = sc.transform(xtr), sc.transform(xte)
out = {"train_rows": len(ytr), "test_rows": len(yte), "features": xtr.shape[1], "models": {}}


def one_pass(model, **kw):
    for lo in range(0, len(ytr), CHUNK):
        model.partial_fit(xtr[lo:lo + CHUNK], ytr[lo:lo + CHUNK], **kw)
    return model


def classifier(name, fit):
    t = time.time()
    m = fit()
    p = m.predict_proba(xte)
    out["models"][name] = {
        "log_loss": float(log_loss(yte, p, labels=m.classes_)),
        "accuracy": float((m.classes_[p.argmax(axis=1)] == yte).mean()),
        "seconds": time.time() - t,
    }


def regressor(name, fit):
    t = time.time()
    m = fit()
    out["models"][name] = {"mse": float(((m.predict(xte) - yte) ** 2).mean()), "seconds": time.time() - t}


if kind in ("binary", "multiclass"):
    ytr, yte = ytr.astype(int), yte.astype(int)
    classes = np.unique(ytr)
    classifier("logistic_regression", lambda: LogisticRegression(max_iter=1000).fit(xtr, ytr))
    classifier("sgd_classifier", lambda: one_pass(SGDClassifier(loss="log_loss", random_state=0), classes=classes))
elif kind == "regression":
    regressor("linear_regression", lambda: LinearRegression().fit(xtr, ytr))
    regressor("sgd_regressor", lambda: one_pass(SGDRegressor(random_state=0)))
else:
    print("unknown kind %r; want binary, multiclass or regression" % kind, file=sys.stderr)
    sys.exit(2)
print(json.dumps(out))
