// Package fleet places the tasks of a tasks file on the machines of a pool and
// follows them to the end: each task waits in file order for a free slot on a
// machine whose measured record can wall its lane (carry.Choose) and whose
// labels meet its needs; a machine that drops turns its runs lost and their
// tasks are placed again while their retries last; a cancelled dispatch stops
// what runs and starts nothing more.
//
// The package holds the tasks file's parser (Parse), the dispatch itself (Run,
// driving a Runner that starts one attempt of a task on one machine), the
// dispatch's record (Record), and what a person sees of it: live terminal
// frames (Frame, Live), one plain line or JSON object per change (PlainLine,
// JSONLine) and the summary table at the end (Table, ExitCode). The renderers are
// pure functions of the record.
package fleet
