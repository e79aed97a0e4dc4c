package records

import (
	"bytes"
	"fmt"

	"github.com/postern-dev/postern/machine"
	bolt "go.etcd.io/bbolt"
)

// Installed agents are kept per machine and agent hash: what the controller
// measured of the file over sftp when it installed it (or last read it back),
// to compare with before each use. It is measured, never typed, like a
// machine's record.

func agentKey(machine, hash string) []byte { return []byte(machine + "\x00" + hash) }

// PutAgent records what was measured of an agent's file on a machine.
func (s *Store) PutAgent(name string, st machine.AgentFile) error {
	return s.update(func(tx *bolt.Tx) error { return s.putJSON(tx, bucketAgents, string(agentKey(name, st.Hash)), st) })
}

// Agent returns what was recorded of the agent with hash on a machine, or
// ErrNotFound.
func (s *Store) Agent(name, hash string) (*machine.AgentFile, error) {
	var st machine.AgentFile
	err := s.view(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketAgents)
		if err != nil {
			return err
		}
		raw := b.Get(agentKey(name, hash))
		if raw == nil {
			return fmt.Errorf("agent %.12s on machine %q: %w", hash, name, ErrNotFound)
		}
		return s.decode(bucketAgents, name+"/"+hash, raw, &st)
	})
	if err != nil {
		return nil, err
	}
	return &st, nil
}

// Agents returns what is recorded of every agent installed on a machine.
func (s *Store) Agents(name string) ([]machine.AgentFile, error) {
	var out []machine.AgentFile
	err := s.view(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketAgents)
		if err != nil {
			return err
		}
		prefix := []byte(name + "\x00")
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var st machine.AgentFile
			if err := s.decode(bucketAgents, name+"/"+string(k[len(prefix):]), v, &st); err != nil {
				return err
			}
			out = append(out, st)
		}
		return nil
	})
	return out, err
}

// deleteAgents forgets every agent recorded for a machine.
func (s *Store) deleteAgents(tx *bolt.Tx, machine string) error {
	b, err := s.bucket(tx, bucketAgents)
	if err != nil {
		return err
	}
	prefix := []byte(machine + "\x00")
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// RemoveAgent forgets what was recorded of one agent on a machine (its file
// was removed there). Forgetting one never recorded is no error.
func (s *Store) RemoveAgent(machine, hash string) error {
	return s.update(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketAgents)
		if err != nil {
			return err
		}
		return b.Delete(agentKey(machine, hash))
	})
}
