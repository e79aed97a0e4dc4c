// Package carry chooses the wall a run gets from what was measured about its machine,
// or refuses the run before anything is spawned.
package carry
