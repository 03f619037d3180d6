package drain

import "time"

// Caller is who asked for a drain or a resume, as the log and /status show it: the HTTP client
// (remote address, method, user agent), or the process itself ("signal SIGTERM", "command drain").
type Caller struct {
	Remote    string `json:"remote,omitempty"`     // "10.0.0.7:51234"; "unix" for a unix-socket client
	Method    string `json:"method"`               // "GET", "POST", "signal SIGTERM", "command drain"
	UserAgent string `json:"user_agent,omitempty"` // as sent, at most maxUserAgent bytes
}

// maxUserAgent bounds the user agent kept per caller: it is logged and shown, and it is the client's text.
const maxUserAgent = 200

// Attrs returns the caller as slog key/values, leaving out what is unknown (a signal has no address).
func (c Caller) Attrs() []any {
	var a []any
	for _, kv := range [][2]string{{"remote", c.Remote}, {"method", c.Method}, {"user_agent", c.UserAgent}} {
		if kv[1] != "" {
			a = append(a, kv[0], kv[1])
		}
	}
	return a
}

// NewHTTPCaller names an HTTP client.
func NewHTTPCaller(remote, method, userAgent string) Caller {
	if remote == "" || remote == "@" { // net/http's RemoteAddr for a unix-socket client
		remote = "unix"
	}
	if len(userAgent) > maxUserAgent {
		userAgent = userAgent[:maxUserAgent]
	}
	return Caller{Remote: remote, Method: method, UserAgent: userAgent}
}

// Resumed says who made Envoy LIVE again after a drain, and when.
type Resumed struct {
	By Caller    `json:"by"`
	At time.Time `json:"at"`
}
