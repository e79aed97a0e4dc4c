package records

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/postern-dev/postern/door/policy"
)

// bucketClients holds a gateway's clients. It is made on the first write, so
// a store from before gateways reads as one with no clients.
var bucketClients = []byte("clients")

// ErrExists is returned when a client to be added already exists.
var ErrExists = errors.New("already exists")

// GatewayClient is one client of a gateway: the name its proxy credentials
// give, the SHA-256 of its token (the token itself is never stored), and its
// own policy; a client without one is judged by the gateway's default.
type GatewayClient struct {
	Name      string       `json:"name"`
	TokenHash string       `json:"token_hash"` // hex
	Policy    *policy.Spec `json:"policy,omitempty"`
	CreatedAt time.Time    `json:"created_at"`
	TokenAt   time.Time    `json:"token_at"` // made or last rotated
	PolicyAt  time.Time    `json:"policy_at,omitzero"`
}

// AddClient stores a new client; one of that name already there is ErrExists.
func (s *Store) AddClient(c GatewayClient) error {
	return s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketClients)
		if err != nil {
			return err
		}
		if b.Get([]byte(c.Name)) != nil {
			return fmt.Errorf("client %q: %w", c.Name, ErrExists)
		}
		return s.putClient(b, c)
	})
}

// UpdateClient changes one client in one transaction: fn gets the stored
// client and changes it; an error from fn leaves the store as it was. A
// client that does not exist is ErrNotFound.
func (s *Store) UpdateClient(name string, fn func(*GatewayClient) error) (GatewayClient, error) {
	var out GatewayClient
	err := s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketClients)
		if err != nil {
			return err
		}
		raw := b.Get([]byte(name))
		if raw == nil {
			return fmt.Errorf("client %q: %w", name, ErrNotFound)
		}
		var c GatewayClient
		if err := s.decode(bucketClients, name, raw, &c); err != nil {
			return err
		}
		if err := fn(&c); err != nil {
			return err
		}
		c.Name = name
		out = c
		return s.putClient(b, c)
	})
	return out, err
}

func (s *Store) putClient(b *bolt.Bucket, c GatewayClient) error {
	if _, err := b.NextSequence(); err != nil {
		return err
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode client %q: %w", c.Name, err)
	}
	return b.Put([]byte(c.Name), raw)
}

// RemoveClient removes a client; one that does not exist is ErrNotFound.
func (s *Store) RemoveClient(name string) error {
	return s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketClients)
		if err != nil {
			return err
		}
		if b.Get([]byte(name)) == nil {
			return fmt.Errorf("client %q: %w", name, ErrNotFound)
		}
		if _, err := b.NextSequence(); err != nil {
			return err
		}
		return b.Delete([]byte(name))
	})
}

// GatewayClientByName returns one client.
func (s *Store) GatewayClientByName(name string) (GatewayClient, error) {
	var c GatewayClient
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketClients)
		var raw []byte
		if b != nil {
			raw = b.Get([]byte(name))
		}
		if raw == nil {
			return fmt.Errorf("client %q: %w", name, ErrNotFound)
		}
		return s.decode(bucketClients, name, raw, &c)
	})
	return c, err
}

// GatewayClients returns every client, by name, and the version of the
// clients: a number that changes with every change to any of them.
func (s *Store) GatewayClients() ([]GatewayClient, uint64, error) {
	var (
		out []GatewayClient
		ver uint64
	)
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketClients)
		if b == nil {
			return nil
		}
		ver = b.Sequence()
		return b.ForEach(func(k, v []byte) error {
			var c GatewayClient
			if err := s.decode(bucketClients, string(k), v, &c); err != nil {
				return err
			}
			out = append(out, c)
			return nil
		})
	})
	return out, ver, err
}

// GatewayClientsVersion is the version GatewayClients would return, read
// without decoding any client.
func (s *Store) GatewayClientsVersion() (uint64, error) {
	var ver uint64
	err := s.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketClients); b != nil {
			ver = b.Sequence()
		}
		return nil
	})
	return ver, err
}
