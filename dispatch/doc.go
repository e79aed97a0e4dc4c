// Package dispatch takes a run from its spec to its final record: policy, machine
// record, carry, wall and door, events.
//
// A dispatch of a tasks file (Dispatch) places its tasks with package fleet
// and runs each attempt as an ordinary run (FleetRunner), keeping the
// dispatch's own record and each run's output in the records.
package dispatch
