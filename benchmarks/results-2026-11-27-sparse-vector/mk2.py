import numpy as np, xgboost as xgb
import silvanforge
def mk(name, F, T, D, n):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(n, F)).astype(np.float32)
    w = rng.normal(size=min(F, 20))
    y = (np.sin(X[:, :20] @ w) + rng.normal(scale=0.3, size=n) > 0).astype(int)
    b = xgb.train({"max_depth": D, "eta": 0.3, "objective": "binary:logistic", "tree_method": "hist", "nthread": 1, "min_child_weight": 0.1},
                  xgb.DMatrix(X, y), T)
    b.save_model(name + ".json")
    f = silvanforge.load(name + ".json")
    print(name, round(f.n_trees * (2 ** (int(f.tree_depths.max()) + 1) - 1) / f.n_nodes, 2), f.n_nodes)
for n in (300, 600, 1000):
    mk(f"h28_n{n}", 28, 100, 8, n)
mk("h28_d10_n3000", 28, 100, 10, 3000)
mk("h90_d8_n800", 90, 100, 8, 800)
