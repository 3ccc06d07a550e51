"""OpenDP's side of the `utility` bench (aggregator/dp/benches/utility/main.rs).

Reads the bench's windows and cases (JSON, argv[1]) and writes OpenDP's
released value per case and window (JSON, argv[2]). Each case is one
statistic alone at ε per window, pure DP, under one neighbouring relation:
change-one is a sized domain at symmetric distance 2, add-remove an unsized
domain at distance 1. The noise scale is OpenDP's own (binary search for
the smallest scale meeting ε).
"""

import json
import sys

import opendp.prelude as dp

dp.enable_features("contrib")


def measurement(case, lower, upper, n, candidates, edges):
    sized = case["relation"] == "change-one"
    d_in = 2 if sized else 1
    bounded = dp.vector_domain(
        dp.atom_domain(bounds=(lower, upper), nan=False), size=n if sized else None
    )
    floats = dp.vector_domain(
        dp.atom_domain(T=float, nan=False), size=n if sized else None
    )
    ints = dp.vector_domain(dp.atom_domain(T=int), size=n if sized else None)
    metric = dp.symmetric_distance()
    stat = case["statistic"]
    if stat == "mean":
        make = lambda s: dp.t.make_mean(bounded, metric) >> dp.m.then_laplace(s)
    elif stat == "sum":
        make = lambda s: dp.t.make_sum(bounded, metric) >> dp.m.then_laplace(s)
    elif stat == "histogram":
        cats = list(range(len(edges) - 2))
        make = lambda s: dp.t.make_count_by_categories(
            ints, metric, categories=cats
        ) >> dp.m.then_laplace(s)
    else:
        make = lambda s: dp.m.make_private_quantile(
            floats, metric, dp.max_divergence(), candidates, case["level"], s
        )
    scale = dp.binary_search_param(make, d_in=d_in, d_out=case["epsilon"])
    return make(scale), scale


def bin_of(x, edges):
    # Bins [e_i, e_{i+1}), the last closed; the last bin is OpenDP's
    # "null" category (listed last), as in FleetDP's histogram.
    for i in range(len(edges) - 2):
        if x < edges[i + 1]:
            return i
    return len(edges) - 2


def main():
    with open(sys.argv[1]) as f:
        job = json.load(f)
    lower, upper, n = job["lower"], job["upper"], job["n"]
    res = job["resolution"]
    steps = round((upper - lower) / res)
    candidates = [round(lower + i * res, 10) for i in range(steps + 1)]
    edges = job["edges"]
    out = []
    for i, case in enumerate(job["cases"]):
        meas, scale = measurement(case, lower, upper, n, candidates, edges)
        windows = job["shapes"][case["shape"]]
        values = []
        for w in windows:
            if case["statistic"] == "histogram":
                r = meas([bin_of(x, edges) for x in w])
            else:
                r = meas(w)
            values.append(r if isinstance(r, list) else [r])
        out.append({"scale": scale, "values": values})
        print(f"  OpenDP {i + 1}/{len(job['cases'])}", file=sys.stderr, end="\r")
    print(file=sys.stderr)
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
