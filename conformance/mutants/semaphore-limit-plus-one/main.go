// Command semaphore-limit-plus-one sends a semaphore claim's limit one higher than asked, so one holder too many is let in.
package main

import "github.com/monolock/monolock/conformance/mutants/internal/base"

func main() { base.Main("mutant-semaphore-limit-plus-one", base.Bugs{SemaphoreLimitPlusOne: true}) }
