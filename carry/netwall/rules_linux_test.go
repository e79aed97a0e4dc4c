package netwall

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/nftables"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func TestRulesGolden(t *testing.T) {
	tests := []struct {
		name string
		cfg  RuleConfig
	}{
		{"ports-80-443", RuleConfig{Ports: []uint16{443, 80}, TransparentPort: 40001, DNSPort: 40002}},
		{"ports-443", RuleConfig{Ports: []uint16{443}, TransparentPort: 40001, DNSPort: 40002}},
		{"ports-many", RuleConfig{Ports: []uint16{22, 80, 443, 443, 8080, 8443, 9418, 5432, 3306, 6379, 27017}, TransparentPort: 40001, DNSPort: 40002}},
		{"ports-none", RuleConfig{TransparentPort: 40001, DNSPort: 40002}},
		{"ports-80-443-logged", RuleConfig{Ports: []uint16{443, 80}, TransparentPort: 40001, DNSPort: 40002, LogGroup: wallLogGroup}},
		{"all-tcp", RuleConfig{Ports: []uint16{443, 80}, AllTCP: true, TransparentPort: 40001, DNSPort: 40002}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Rules(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tt.name+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run 'go test ./carry/netwall -run TestRulesGolden -update' to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Rules(%+v) differs from %s:\n--- got\n%s\n--- want\n%s", tt.cfg, path, got, want)
			}
		})
	}
}

func TestRulesRejects(t *testing.T) {
	for _, cfg := range []RuleConfig{
		{Ports: []uint16{0, 443}, TransparentPort: 1, DNSPort: 2},
		{Ports: []uint16{443}, DNSPort: 2},
		{Ports: []uint16{443}, TransparentPort: 1},
	} {
		if _, err := Rules(cfg); !errors.Is(err, ErrBadRuleConfig) {
			t.Errorf("Rules(%+v) error = %v, want ErrBadRuleConfig", cfg, err)
		}
	}
}

// recordingConn stands in for the kernel and keeps what apply queued.
type recordingConn struct {
	tables  []*nftables.Table
	chains  []*nftables.Chain
	sets    map[string][]nftables.SetElement
	rules   []*nftables.Rule
	flushes int
}

func (c *recordingConn) AddTable(t *nftables.Table) *nftables.Table {
	c.tables = append(c.tables, t)
	return t
}
func (c *recordingConn) AddChain(ch *nftables.Chain) *nftables.Chain {
	c.chains = append(c.chains, ch)
	return ch
}
func (c *recordingConn) AddSet(s *nftables.Set, e []nftables.SetElement) error {
	if c.sets == nil {
		c.sets = map[string][]nftables.SetElement{}
	}
	s.ID = 7
	c.sets[s.Name] = e
	return nil
}
func (c *recordingConn) AddRule(r *nftables.Rule) *nftables.Rule {
	c.rules = append(c.rules, r)
	return r
}
func (c *recordingConn) Flush() error { c.flushes++; return nil }

func TestApplyIsOneTransaction(t *testing.T) {
	rs, err := buildRuleset(RuleConfig{Ports: []uint16{80, 443, 80}, TransparentPort: 1000, DNSPort: 1001})
	if err != nil {
		t.Fatal(err)
	}
	var c recordingConn
	if err := rs.apply(&c); err != nil {
		t.Fatal(err)
	}
	if c.flushes != 1 || len(c.tables) != 1 || len(c.chains) != 2 {
		t.Fatalf("apply queued %d tables, %d chains and flushed %d times; want 1, 2, 1", len(c.tables), len(c.chains), c.flushes)
	}
	if got := len(c.sets[portsSetName]); got != 2 {
		t.Errorf("set %s has %d elements, want 2 (80 and 443, deduplicated)", portsSetName, got)
	}
	if got, want := len(c.rules), 6+5; got != want {
		t.Errorf("apply queued %d rules, want %d", got, want)
	}
}
