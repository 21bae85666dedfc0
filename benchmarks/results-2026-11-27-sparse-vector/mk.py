import numpy as np, xgboost as xgb, sys
def mk(name, F, T, D, n=4000):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, F)).astype(np.float32)
    w = rng.normal(size=20)
    y = (np.sin(X[:, :20] @ w) + rng.normal(scale=0.3, size=n) > 0).astype(int)
    b = xgb.train({"max_depth": D, "eta": 0.3, "objective": "binary:logistic", "tree_method": "hist", "nthread": 2},
                  xgb.DMatrix(X, y), T)
    b.save_model(name + ".json")
mk("f200_t10_d6", 200, 10, 6); mk("f200_t20_d6", 200, 20, 6); mk("f400_t10_d8", 400, 10, 8)
mk("eps_deep", 2000, 100, 8, n=20000)
