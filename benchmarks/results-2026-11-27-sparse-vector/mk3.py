import numpy as np, xgboost as xgb, silvanforge
rng = np.random.default_rng(2)
n, F = 3000, 28
X = rng.normal(size=(n, F)).astype(np.float32)
w = rng.normal(size=20)
y = (np.sin(X[:, :20] @ w) + rng.normal(scale=0.3, size=n) > 0).astype(int)
b = xgb.train({"max_depth": 10, "eta": 0.1, "objective": "binary:logistic", "tree_method": "hist", "nthread": 2, "min_child_weight": 0.1}, xgb.DMatrix(X, y), 500)
b.save_model("h28_d10_t500.json")
f = silvanforge.load("h28_d10_t500.json")
print(round(f.n_trees * (2 ** (int(f.tree_depths.max()) + 1) - 1) / f.n_nodes, 2), f.n_nodes)
