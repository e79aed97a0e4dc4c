// Package event holds the door's events: one judged connection attempt, or the
// end of an admitted one, with its typed kind and decision. It is a leaf: the
// records store, the gateway and the run's event log read events without
// pulling in the door, the walls or their kernel libraries.
package event
