package records

import "time"

// Workspace is the copy of the caller's work a run worked in, and what
// became of its result.
type Workspace struct {
	// Mode is "git" (a work tree shipped with its history), "plain" (a
	// directory), or "copy" (a local run in a fresh copy of its work tree).
	Mode string `json:"mode"`
	// Repo is the caller's work tree (or directory); Subdir is where in it
	// the run started, with slashes.
	Repo   string `json:"repo"`
	Subdir string `json:"subdir,omitempty"`
	// Base is the commit the run started from ("" : no commits yet);
	// Branch the caller's branch then ("" : detached).
	Base   string `json:"base,omitempty"`
	Branch string `json:"branch,omitempty"`
	// Key names the repository's cache on machines.
	Key string `json:"key,omitempty"`
	// Dir is the run's copy on its machine.
	Dir string `json:"dir,omitempty"`
	// State is WorkspaceShipped while the copy is on the machine,
	// WorkspaceFetched once the result is home, WorkspaceUnchanged for a
	// run that changed nothing, WorkspaceKept for a copy left on the
	// machine on purpose (--keep-workspace) or because its result could
	// not be fetched (Error says why; 'postern runs fetch').
	State string `json:"state"`
	// Result is the result's commit; ResultBranch the branch it is on in
	// the caller's repository.
	Result       string `json:"result,omitempty"`
	ResultBranch string `json:"result_branch,omitempty"`
	// Descends says the result's history holds the base; a run that
	// rewrote history makes one that does not.
	Descends bool   `json:"descends,omitempty"`
	Commits  int    `json:"commits,omitempty"`
	Stat     string `json:"stat,omitempty"` // git's shortstat of base..result
	// Removed says the copy on the machine was removed.
	Removed bool `json:"removed,omitempty"`
	// Shipped and Bundled are the bytes sent: all of it, and the history.
	Shipped int64 `json:"shipped,omitempty"`
	Bundled int64 `json:"bundled,omitempty"`
	// ShippedAt is when shipping ended (before the command started);
	// FetchStartedAt when fetching began (after it ended).
	ShipStartedAt  time.Time `json:"ship_started_at,omitzero"`
	ShippedAt      time.Time `json:"shipped_at,omitzero"`
	FetchStartedAt time.Time `json:"fetch_started_at,omitzero"`
	FetchedAt      time.Time `json:"fetched_at,omitzero"` // when the result was home
	Error          string    `json:"error,omitempty"`
	// Keep keeps the copy on the machine once the result is home
	// (--keep-workspace); MaxResult bounds the result (--max-result).
	Keep      bool  `json:"keep,omitempty"`
	MaxResult int64 `json:"max_result,omitempty"`
}

// Workspace states.
const (
	WorkspaceShipped   = "shipped"
	WorkspaceFetched   = "fetched"
	WorkspaceUnchanged = "unchanged"
	WorkspaceKept      = "kept"
)
