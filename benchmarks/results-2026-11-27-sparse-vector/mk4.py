import numpy as np, xgboost as xgb, silvanforge
rng = np.random.default_rng(3)
n, F = 4000, 5000
X = rng.normal(size=(n, F)).astype(np.float32)
w = rng.normal(size=20)
y = (np.sin(X[:, :20] @ w) + rng.normal(scale=0.3, size=n) > 0).astype(int)
b = xgb.train({"max_depth": 8, "eta": 0.3, "objective": "binary:logistic", "tree_method": "hist", "nthread": 1}, xgb.DMatrix(X, y), 100)
b.save_model("f5000.json")
f = silvanforge.load("f5000.json")
print(round(f.n_trees * (2 ** (int(f.tree_depths.max()) + 1) - 1) / f.n_nodes, 2), f.n_nodes)
