package records

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/postern-dev/postern/door/policy"
)

func TestGatewayClientsSurviveReopenAndCountChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if cs, ver, err := s.GatewayClients(); err != nil || len(cs) != 0 || ver != 0 {
		t.Fatalf("a new store: %v %d %v", cs, ver, err)
	}
	now := time.Now().UTC()
	if err := s.AddClient(GatewayClient{Name: "alice", TokenHash: "aa", CreatedAt: now, TokenAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddClient(GatewayClient{Name: "alice", TokenHash: "bb"}); !errors.Is(err, ErrExists) {
		t.Fatalf("adding alice twice: %v", err)
	}
	v1, _ := s.GatewayClientsVersion()
	if _, err := s.UpdateClient("alice", func(c *GatewayClient) error {
		c.Policy = &policy.Spec{Allow: []string{"github.com"}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateClient("alice", func(c *GatewayClient) error { return errors.New("no") }); err == nil {
		t.Fatal("an update whose fn failed succeeded")
	}
	if _, err := s.UpdateClient("bob", func(*GatewayClient) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update of a missing client: %v", err)
	}
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s2.GatewayClientByName("alice")
	if err != nil || c.TokenHash != "aa" || c.Policy == nil || c.Policy.Allow[0] != "github.com" {
		t.Fatalf("alice after reopening: %+v %v", c, err)
	}
	v2, _ := s2.GatewayClientsVersion()
	if v2 <= v1 {
		t.Fatalf("version %d after a change, %d before", v2, v1)
	}
	if err := s2.RemoveClient("alice"); err != nil {
		t.Fatal(err)
	}
	if err := s2.RemoveClient("alice"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("removing alice twice: %v", err)
	}
	if cs, v3, _ := s2.GatewayClients(); len(cs) != 0 || v3 <= v2 {
		t.Fatalf("after remove: %v version %d", cs, v3)
	}
}
