// Package carry chooses the wall a run gets from what was measured about its machine,
// or refuses the run before anything is spawned; and it is the seam every carry
// implements: a raised Wall that starts, signals, waits for and closes the command
// behind it (carry/netwall, carry/container, carry/seatbelt).
package carry
