// Package records stores machines, probe records, runs and their events, and
// what was measured of the agents installed on machines, in one bbolt file,
// durably and without stalling a running run; and dispatches, with the last
// output of their runs (bounded, stream by stream).
//
// The file is never made afresh over what is there: a file that is not a store
// postern can read is reported as a *DamagedError naming it, and left as it
// is; one another process holds too long is a *LockedError naming the holder.
// A run's events are stored at a bounded rate and never block the door; a
// full filesystem costs the run its events, not its record (see EventLog and
// Store.PutRun).
package records
