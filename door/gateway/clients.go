package gateway

import (
	"errors"
	"fmt"
	"time"

	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/records"
)

// ClientInfo is a client as the API and the command line show it: never
// its token, nor the token's hash.
type ClientInfo struct {
	Name      string      `json:"name"`
	CreatedAt time.Time   `json:"created_at"`
	TokenAt   time.Time   `json:"token_at"`
	OwnPolicy bool        `json:"own_policy"` // false: judged by the default
	Policy    policy.Spec `json:"policy"`     // the policy in force
	PolicyAt  time.Time   `json:"policy_at,omitzero"`
}

// NewClient is a client just made, or given a new token: the token is shown
// this once.
type NewClient struct {
	Name  string `json:"name"`
	Token string `json:"token"`
}

// AddClient registers a client in the records and returns its token. A
// running gateway takes it up within its reload interval.
func AddClient(store *records.Store, name string) (NewClient, error) {
	if err := CheckName(name); err != nil {
		return NewClient{}, err
	}
	tok, err := NewToken()
	if err != nil {
		return NewClient{}, err
	}
	now := time.Now().UTC()
	if err := store.AddClient(records.GatewayClient{Name: name, TokenHash: HashToken(tok), CreatedAt: now, TokenAt: now}); err != nil {
		return NewClient{}, err
	}
	return NewClient{Name: name, Token: tok}, nil
}

// RotateToken gives a client a new token; the old one stops working.
func RotateToken(store *records.Store, name string) (NewClient, error) {
	tok, err := NewToken()
	if err != nil {
		return NewClient{}, err
	}
	_, err = store.UpdateClient(name, func(c *records.GatewayClient) error {
		c.TokenHash = HashToken(tok)
		c.TokenAt = time.Now().UTC()
		return nil
	})
	if err != nil {
		return NewClient{}, err
	}
	return NewClient{Name: name, Token: tok}, nil
}

// RemoveClient removes a client: its credentials stop working.
func RemoveClient(store *records.Store, name string) error {
	return store.RemoveClient(name)
}

// ListClients returns every client; def is the policy of those without one
// of their own.
func ListClients(store *records.Store, def *policy.Policy) ([]ClientInfo, error) {
	recs, _, err := store.GatewayClients()
	if err != nil {
		return nil, err
	}
	out := make([]ClientInfo, 0, len(recs))
	for _, r := range recs {
		out = append(out, info(r, def))
	}
	return out, nil
}

func info(r records.GatewayClient, def *policy.Policy) ClientInfo {
	ci := ClientInfo{Name: r.Name, CreatedAt: r.CreatedAt, TokenAt: r.TokenAt, PolicyAt: r.PolicyAt}
	if r.Policy != nil {
		ci.OwnPolicy = true
		ci.Policy = *r.Policy
	} else {
		ci.Policy = def.Spec()
	}
	return ci
}

// Client management of a running gateway: the records first, then what the
// door judges by, so a change counts from the next request.

func (g *Gateway) addClient(name string) (NewClient, error) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	nc, err := AddClient(g.cfg.Store, name)
	if err != nil {
		return nc, err
	}
	return nc, g.refreshLocked(name)
}

func (g *Gateway) rotateToken(name string) (NewClient, error) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	nc, err := RotateToken(g.cfg.Store, name)
	if err != nil {
		return nc, err
	}
	return nc, g.refreshLocked(name)
}

func (g *Gateway) removeClient(name string) error {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if err := RemoveClient(g.cfg.Store, name); err != nil {
		return err
	}
	g.mu.Lock()
	delete(g.clients, name)
	g.mu.Unlock()
	g.events.forget(name)
	g.metrics.forget(name)
	return nil
}

// setPolicy changes a client's policy by change, which gets the policy in
// force (its own, or the default) and returns the new one, or nil to go
// back to the default. The new policy is compiled before anything else; an
// error from compiling it is a *policy.SpecError. The door judges by it
// from the moment it is compiled, while the records are written: the
// answer waits until the change is durable, and a change the records
// refuse is taken back.
func (g *Gateway) setPolicy(name string, change func(cur policy.Spec) (*policy.Spec, error)) (ClientInfo, error) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	g.mu.RLock()
	st := g.clients[name]
	g.mu.RUnlock()
	if st == nil {
		return ClientInfo{}, fmt.Errorf("client %q: %w", name, records.ErrNotFound)
	}
	cur := g.cfg.Default.Spec()
	if st.rec.Policy != nil {
		cur = *st.rec.Policy
	}
	next, err := change(cur)
	if err != nil {
		return ClientInfo{}, err
	}
	rec := st.rec
	rec.Policy = nil
	if next != nil {
		p, err := policy.FromSpec(policySource(name), *next)
		if err != nil {
			return ClientInfo{}, err
		}
		norm := p.Spec()
		rec.Policy = &norm
	}
	rec.PolicyAt = time.Now().UTC()
	g.put(rec)
	stored, err := g.cfg.Store.UpdateClient(name, func(c *records.GatewayClient) error {
		c.Policy, c.PolicyAt = rec.Policy, rec.PolicyAt
		return nil
	})
	if err != nil {
		if errors.Is(err, records.ErrNotFound) {
			// Removed by another process since the last reload.
			g.mu.Lock()
			delete(g.clients, name)
			g.mu.Unlock()
		} else {
			g.put(st.rec)
		}
		return ClientInfo{}, err
	}
	g.put(stored)
	return info(stored, g.cfg.Default), nil
}

// refreshLocked reads one client from the records into memory. g.wmu is held.
func (g *Gateway) refreshLocked(name string) error {
	rec, err := g.cfg.Store.GatewayClientByName(name)
	if err != nil {
		return fmt.Errorf("read client %q back: %w", name, err)
	}
	g.put(rec)
	return nil
}

func (g *Gateway) put(rec records.GatewayClient) {
	st := g.state(rec)
	g.mu.Lock()
	g.clients[rec.Name] = st
	g.mu.Unlock()
}

// clientInfo returns one client as it is judged now.
func (g *Gateway) clientInfo(name string) (ClientInfo, bool) {
	g.mu.RLock()
	st := g.clients[name]
	g.mu.RUnlock()
	if st == nil {
		return ClientInfo{}, false
	}
	return info(st.rec, g.cfg.Default), true
}

// clientInfos returns every client as judged now, by name.
func (g *Gateway) clientInfos() []ClientInfo {
	g.mu.RLock()
	out := make([]ClientInfo, 0, len(g.clients))
	for _, st := range g.clients {
		out = append(out, info(st.rec, g.cfg.Default))
	}
	g.mu.RUnlock()
	sortInfos(out)
	return out
}
