package main

// runMain is replaced by the run implementation.
func runMain(args []string) int { return 2 }
