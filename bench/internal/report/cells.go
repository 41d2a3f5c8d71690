package report

import "slices"

// distinct lists key(c) of every cell once, in the order of first
// appearance: the rows of a section, as the run measured them.
func distinct[C any, K comparable](cells []C, key func(C) K) []K {
	var out []K
	for _, c := range cells {
		if k := key(c); !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// present keeps the values of order that some cell has as its key, in
// order's order: the faults or variants a run measured, in their fixed order.
func present[C any, K comparable](order []K, cells []C, key func(C) K) []K {
	var out []K
	for _, k := range order {
		if slices.ContainsFunc(cells, func(c C) bool { return key(c) == k }) {
			out = append(out, k)
		}
	}
	return out
}
