"""scikit-learn on the digits split of linear_test.go: rows i % 5 == 4 are
the test set, the others train. Prints JSON accuracies (and exits 3 with a
clear message when scikit-learn is missing)."""
import gzip, json, sys
try:
    import numpy as np
    from sklearn.linear_model import LogisticRegression, SGDClassifier
    from sklearn.preprocessing import StandardScaler
except ImportError as e:
    print("scikit-learn is missing (%s): apt-get install python3-sklearn" % e, file=sys.stderr)
    sys.exit(3)

data = np.loadtxt(gzip.open(sys.argv[1], "rt"), delimiter=",")
x, y = data[:, :-1], data[:, -1].astype(int)
test = np.arange(len(y)) % 5 == 4
sc = StandardScaler().fit(x[~test])
xtr, xte = sc.transform(x[~test]), sc.transform(x[test])
out = {"train_rows": int((~test).sum()), "test_rows": int(test.sum())}
lr = LogisticRegression(max_iter=5000).fit(xtr, y[~test])
out["logistic_regression"] = float((lr.predict(xte) == y[test]).mean())
sgd = SGDClassifier(loss="log_loss", random_state=0, max_iter=1000, tol=1e-4).fit(xtr, y[~test])
out["sgd_classifier"] = float((sgd.predict(xte) == y[test]).mean())
# One pass, as a stream: partial_fit on mini-batches of 16 rows in the
# file's order (scikit-learn's defaults otherwise), the mean of 5 seeds.
ytr, one = y[~test], []
for seed in range(5):
    s = SGDClassifier(loss="log_loss", random_state=seed)
    for i in range(0, len(ytr), 16):
        s.partial_fit(xtr[i:i + 16], ytr[i:i + 16], classes=np.arange(10))
    one.append(float((s.predict(xte) == y[test]).mean()))
out["sgd_one_pass"] = sum(one) / len(one)
print(json.dumps(out))
