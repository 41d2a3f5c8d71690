package main

// serveMain is replaced by the server implementation.
func serveMain(args []string) int { return 2 }
