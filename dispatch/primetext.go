package dispatch

import (
	"log/slog"
	"path/filepath"
	"time"

	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/internal/hugetext"
	"github.com/postern-dev/postern/records"
)

// primeAfter is how long a run lasts before its end may prime postern's code
// (primeAtExit): a few tens of milliseconds, once, where it is unseen.
const primeAfter = time.Second

// primeAtExit asks that this process, at its exit, turn into the wall's init
// kept in dir to hold postern's code in huge pages for its later starts
// (internal/hugetext). A probe asks, and a run that lasted: both have time
// that a short run has not. Nothing is asked where the kernel cannot.
func primeAtExit(dir string, logger *slog.Logger) {
	if dir == "" || !hugetext.Possible() {
		return
	}
	p, err := netwall.KeptInit(dir)
	if err != nil || p == "" {
		if logger != nil {
			logger.Debug("postern's code not primed: no init kept", "dir", dir, "err", err)
		}
		return
	}
	hugetext.AtExit(p)
}

// initDir is where local runs keep the wall's init: beside the records,
// which no run sees.
func initDir(store *records.Store) string {
	return filepath.Join(filepath.Dir(store.Path()), "lib")
}
