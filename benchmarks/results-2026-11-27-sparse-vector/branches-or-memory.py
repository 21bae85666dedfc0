import sys, time, numpy as np, silvanforge
p = silvanforge.compile(sys.argv[1])
rng = np.random.default_rng(0)
big = rng.normal(size=(16 * 1024, 2000)).astype(np.float32)
R = 64
hot = big[:R].copy()
def t(f, reps):
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter(); f(); best = min(best, time.perf_counter() - t0)
    return best / reps
def cp(i): np.copyto(hot, big[i*R:(i+1)*R])
def cpp(i): np.copyto(hot, big[i*R:(i+1)*R]); p.predict(hot, n_jobs=1)
for rnd in range(3):
    th = t(lambda: [p.predict(hot, n_jobs=1) for _ in range(200)], 200 * R)
    tc = t(lambda: [p.predict(big[i*R:(i+1)*R], n_jobs=1) for i in range(200)], 200 * R)
    tcp = t(lambda: [cp(i) for i in range(200)], 200 * R)
    tcpp = t(lambda: [cpp(i) for i in range(200)], 200 * R)
    print(f"hot {th*1e9:.0f} cold {tc*1e9:.0f} copy {tcp*1e9:.0f} copy+predict-in-cache {tcpp*1e9:.0f} ns/row")
