"""2 threads against 1 when rows come as float64 or float32 (docs/ARCHITECTURE.md,
"Rows of another dtype than the model's").

    OMP_WAIT_POLICY=ACTIVE python row_dtype.py ../../../shared/models/nyc_taxi.lgb.txt 4096

`predict` on every distinct batch of 65536 rows drawn at the model's split points; the
four (dtype, threads) cases in a shuffled order each round, 25 rounds, medians and the
quartiles of the 2-thread times.
"""

import os
import random
import sys
import time

import numpy as np

import silvanforge as sf
from silvanforge.bench import random_rows  # keeps an OMP_WAIT_POLICY already set

forest = sf.load(sys.argv[1])
predictor = sf.compile(forest)
n = int(sys.argv[2])
rows = random_rows(forest, 65536)
batches = {dtype: [np.ascontiguousarray(rows[i * n:(i + 1) * n].astype(dtype))
                   for i in range(65536 // n)] for dtype in ("float64", "float32")}
cases = [(dtype, threads) for dtype in batches for threads in (1, 2)]
times: dict = {case: [] for case in cases}
for _ in range(25):
    random.shuffle(cases)
    for dtype, threads in cases:
        start = time.perf_counter()
        for batch in batches[dtype]:
            predictor.predict(batch, n_jobs=threads)
        times[dtype, threads].append((time.perf_counter() - start) / len(batches[dtype]))
print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, model input "
      f"{forest.input_dtype}, {n} rows a call, µs a call")
for dtype in batches:
    one, two = (np.array(times[dtype, t]) * 1e6 for t in (1, 2))
    print(f"{dtype}: 1 thread {np.median(one):.0f}, 2 threads {np.median(two):.0f} "
          f"(quartiles {np.percentile(two, 25):.0f}-{np.percentile(two, 75):.0f}), "
          f"{np.median(one) / np.median(two):.2f}x")
