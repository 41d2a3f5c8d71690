package main

// displayField is text from the server (a lock name, an identity) as one
// field of terminal output. Placeholder until escaping lands.
func displayField(s string) string { return s }
