// Package dispatch takes a run from its spec to its final record: policy, machine
// record, carry, wall and door, events.
package dispatch
