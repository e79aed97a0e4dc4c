// Package benchcmd wires a benchmark command: the flags every benchmark has
// (-postern, -quick, -out), signals and a deadline, the leftovers of an
// interrupted earlier run, the root check's message, and the markdown out.
// It lives on the command side because it owns signals and the exit code.
package benchcmd
