package gateway

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// maxNameLen bounds a client's name.
const maxNameLen = 64

// ErrBadName is a client name the gateway does not accept.
var ErrBadName = errors.New("a client name is 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit")

// CheckName says whether name can name a client: it goes in proxy
// credentials (NAME:TOKEN), URLs and metric labels as it is.
func CheckName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("client name %q: %w", name, ErrBadName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			return fmt.Errorf("client name %q: %w", name, ErrBadName)
		}
	}
	return nil
}

// NewToken is a fresh client token: 32 random bytes, base64url without
// padding (43 characters that need no escaping in a proxy URL).
func NewToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("make a token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// HashToken is what is stored of a token: its SHA-256, in hex.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// tokenMatches compares a token with a stored hash in constant time.
func tokenMatches(token string, hash [32]byte) bool {
	h := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(h[:], hash[:]) == 1
}

// Credential problems, as the auth failure metric labels them.
const (
	authMissing     = "missing"
	authMalformed   = "malformed"
	authUnknown     = "unknown client"
	authWrong       = "wrong token"
	authOtherClient = "another client's connection"
)

// ProxyAuthError is a Proxy-Authorization value that cannot be read.
type ProxyAuthError struct {
	Problem string // authMissing or authMalformed
	Detail  string
}

func (e *ProxyAuthError) Error() string { return e.Detail }

// ParseProxyAuthorization reads a Proxy-Authorization header value of the
// Basic scheme (RFC 7617): the client's name and its token.
func ParseProxyAuthorization(v string) (name, token string, err error) {
	if v == "" {
		return "", "", &ProxyAuthError{authMissing, "no Proxy-Authorization header"}
	}
	scheme, cred, ok := strings.Cut(strings.TrimLeft(v, " \t"), " ")
	if !ok || !strings.EqualFold(scheme, "basic") {
		return "", "", &ProxyAuthError{authMalformed, "Proxy-Authorization is not of the Basic scheme"}
	}
	raw, err := base64.StdEncoding.DecodeString(strings.Trim(cred, " \t"))
	if err != nil {
		return "", "", &ProxyAuthError{authMalformed, "Proxy-Authorization Basic credentials are not base64"}
	}
	name, token, ok = strings.Cut(string(raw), ":")
	if !ok {
		return "", "", &ProxyAuthError{authMalformed, "Proxy-Authorization Basic credentials have no ':' between name and token"}
	}
	if CheckName(name) != nil {
		return "", "", &ProxyAuthError{authMalformed, "Proxy-Authorization names no valid client"}
	}
	if token == "" {
		return name, "", &ProxyAuthError{authMalformed, "Proxy-Authorization has an empty token"}
	}
	return name, token, nil
}
