package netwall

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// inNewNetns runs fn on a thread of its own in a new network namespace,
// with a descriptor of it. The thread is never unlocked: it ends with fn,
// and the namespace with it.
func inNewNetns(t *testing.T, fn func(nsfd int)) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare a network namespace: %v", err)
			return
		}
		fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Errorf("open the network namespace: %v", err)
			return
		}
		defer unix.Close(fd)
		fn(fd)
	}()
	<-done
}

// tableAsKernelHolds lists the wall's table in the namespace nsfd as the
// kernel holds it: its chains, their rules' expressions and its port set.
func tableAsKernelHolds(t *testing.T, nsfd int) string {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(nsfd))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, tb := range tables {
		fmt.Fprintf(&b, "table %s\n", tb.Name)
		chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(chains, func(a, b *nftables.Chain) int { return strings.Compare(a.Name, b.Name) })
		for _, ch := range chains {
			fmt.Fprintf(&b, " chain %s hook %v prio %v type %v policy %v\n", ch.Name, *ch.Hooknum, *ch.Priority, ch.Type, *ch.Policy)
			rules, err := c.GetRules(tb, ch)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rules {
				for _, e := range r.Exprs {
					if l, ok := e.(*expr.Lookup); ok {
						l.SetID = 0 // the kernel's own number for the set
					}
					fmt.Fprintf(&b, "  %T %+v\n", e, e)
				}
			}
		}
		sets, err := c.GetSets(tb)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sets {
			elems, err := c.GetSetElements(s)
			if err != nil {
				t.Fatal(err)
			}
			var ports []uint16
			for _, e := range elems {
				ports = append(ports, binary.BigEndian.Uint16(e.Key))
			}
			slices.Sort(ports)
			fmt.Fprintf(&b, " set %s %v\n", s.Name, ports)
		}
	}
	return b.String()
}

// The table committed as one batch with one acknowledgement is the table
// the nftables package commits itself, as the kernel lists it.
func TestBatchCommitIsThePackagesTable(t *testing.T) {
	requireRoot(t)
	for _, cfg := range []RuleConfig{
		{Ports: []uint16{443, 80}, TransparentPort: 40001, DNSPort: 40002},
		{Ports: []uint16{443, 80}, AllTCP: true, TransparentPort: 40001, DNSPort: 40002, LogGroup: wallLogGroup},
		{TransparentPort: 40001, DNSPort: 40002},
	} {
		rs, err := buildRuleset(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var ours, theirs string
		inNewNetns(t, func(nsfd int) {
			conn, err := newBatchConn()
			if err != nil {
				t.Error(err)
				return
			}
			if err := rs.apply(conn); err != nil {
				t.Errorf("%+v: %v", cfg, err)
				return
			}
			ours = tableAsKernelHolds(t, nsfd)
		})
		inNewNetns(t, func(nsfd int) {
			conn, err := nftables.New(nftables.WithNetNSFd(nsfd))
			if err != nil {
				t.Error(err)
				return
			}
			if err := rs.apply(conn); err != nil {
				t.Errorf("%+v, the package's commit: %v", cfg, err)
				return
			}
			theirs = tableAsKernelHolds(t, nsfd)
		})
		if ours == "" || !strings.Contains(ours, "chain") {
			t.Fatalf("%+v: nothing listed after the batch:\n%s", cfg, ours)
		}
		if ours != theirs {
			t.Errorf("%+v: the batch's table differs from the package's:\n--- batch\n%s\n--- package\n%s", cfg, ours, theirs)
		}
	}
}

// A batch the kernel refuses in its middle is an error naming the message
// and the kernel's reason, and leaves nothing behind: the table queued
// before the refused rule is not there.
func TestBatchCommitReportsARefusal(t *testing.T) {
	requireRoot(t)
	inNewNetns(t, func(nsfd int) {
		conn, err := newBatchConn()
		if err != nil {
			t.Error(err)
			return
		}
		table := conn.AddTable(&nftables.Table{Name: "postern_refused", Family: nftables.TableFamilyINet})
		chain := conn.AddChain(&nftables.Chain{Name: "out", Table: table})
		conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
		// A jump to a chain that does not exist.
		conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: "nowhere"}}})
		conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}})
		err = conn.Flush()
		if err == nil {
			t.Error("a jump to a missing chain was committed")
			return
		}
		if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "new rule") {
			t.Errorf("error %q: want the refused rule named, with ENOENT", err)
		}
		c, err := nftables.New(nftables.WithNetNSFd(nsfd))
		if err != nil {
			t.Error(err)
			return
		}
		tables, err := c.ListTables()
		if err != nil {
			t.Error(err)
			return
		}
		if len(tables) != 0 {
			t.Errorf("a refused batch left %d tables (%s ...)", len(tables), tables[0].Name)
		}
	})
}

func TestBatchCommitRefusesWhatIsNotABatch(t *testing.T) {
	if err := commitBatch(nil); err == nil {
		t.Error("no messages committed")
	}
	var b batchConn
	c, err := newBatchConn()
	if err != nil {
		t.Fatal(err)
	}
	b = *c
	if err := b.Flush(); err == nil {
		t.Error("an empty commit succeeded")
	}
}

// The kernel's answers are parsed strictly: a datagram cut anywhere is an
// error or an answer, never a panic, and an error is kept.
func FuzzBatchAnswers(f *testing.F) {
	ack := func(seq uint32, code int32) []byte {
		b := make([]byte, 16+4+16)
		binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
		binary.NativeEndian.PutUint16(b[4:], unix.NLMSG_ERROR)
		binary.NativeEndian.PutUint32(b[8:], seq)
		binary.NativeEndian.PutUint32(b[16:], uint32(code))
		return b
	}
	f.Add(ack(4, 0))
	f.Add(append(ack(3, -2), ack(4, 0)...))
	f.Add(ack(1, -12))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var errs []error
		done, err := batchAnswers(b, 4, nil, &errs)
		if err != nil && done {
			t.Fatal("done with an error")
		}
	})
}

func TestBatchAnswers(t *testing.T) {
	ack := func(seq uint32, code int32) []byte {
		b := make([]byte, 16+4+16)
		binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
		binary.NativeEndian.PutUint16(b[4:], unix.NLMSG_ERROR)
		binary.NativeEndian.PutUint32(b[8:], seq)
		binary.NativeEndian.PutUint32(b[16:], uint32(code))
		return b
	}
	for _, c := range []struct {
		name  string
		b     []byte
		done  bool
		errno []syscall.Errno
	}{
		{"the last acknowledged", ack(4, 0), true, nil},
		{"a refusal, then the last", append(ack(3, -int32(syscall.ENOENT)), ack(4, 0)...), true, []syscall.Errno{syscall.ENOENT}},
		{"a refusal only", ack(2, -int32(syscall.EEXIST)), false, []syscall.Errno{syscall.EEXIST}},
		{"the batch refused", ack(1, -int32(syscall.ENOMEM)), true, []syscall.Errno{syscall.ENOMEM}},
	} {
		var errs []error
		done, err := batchAnswers(c.b, 4, nil, &errs)
		if err != nil || done != c.done || len(errs) != len(c.errno) {
			t.Errorf("%s: done %v err %v errs %v; want done %v, errors %v", c.name, done, err, errs, c.done, c.errno)
			continue
		}
		for i, e := range c.errno {
			if !errors.Is(errs[i], e) {
				t.Errorf("%s: error %v, want %v", c.name, errs[i], e)
			}
		}
	}
	var errs []error
	if _, err := batchAnswers(ack(4, 0)[:10], 4, nil, &errs); err == nil {
		t.Error("a cut datagram parsed")
	}
}
