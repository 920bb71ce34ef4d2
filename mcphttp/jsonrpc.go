package mcphttp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/agentkey"
)

// call is a POST body that is a single JSON-RPC request for a deduped
// method: what the wrapper keys, fingerprints and replays.
type call struct {
	id     idem.RequestID
	rawID  json.RawMessage // the id exactly as sent, for rewriting replays
	method string
	// name is params.name (the tool name for tools/call); empty when the
	// method has none.
	name string
	// arguments is params.arguments as sent; nil when absent.
	arguments json.RawMessage
	// meta is params._meta as sent; nil when absent.
	meta json.RawMessage
	// sessionID is _meta.sessionId; empty when absent or not a string.
	sessionID string
	// idemKey is _meta.idempotencyKey; hasKey reports that the member was
	// present at all (a non-string value is an invalid key, not "no key").
	idemKey string
	hasKey  bool
	// paramKey is params.idempotencyKey; hasParamKey as hasKey. See
	// callKey for every key source.
	paramKey    string
	hasParamKey bool
	// round is the digest of a multi round-trip call's later round (its
	// requestState and inputResponses); empty for a first round. See
	// rounds.go.
	round string
	// metaVersion is _meta["io.modelcontextprotocol/protocolVersion"];
	// empty when absent.
	metaVersion string
	// digest is the hex SHA-256 of the method and the canonical params
	// without _meta, the key and the round: for tools/call, the tool name
	// and its arguments.
	digest string
	// refusal, when set, is the data.reason of the [CodeInvalidRequest]
	// the wrapper answers instead of running the call: an id no server
	// answers under ([ReasonUnsupportedID]), or a repeated member
	// ([ReasonDuplicateMember]). Such a call would run unprotected or be
	// recorded under what it did not ask for.
	refusal string
}

// parseCall reports whether body is a single JSON-RPC request, with an id,
// for one of methods, and returns it. Anything else (a batch, a
// notification, a response to a server request, a request for another
// method, malformed JSON, params that are not an object, a tools/call
// without a string name) is not a call: the wrapper passes it to the inner
// handler, which owns the answer. A call the wrapper must refuse rather
// than run unprotected has refusal set: see [call.refusal].
//
// Member names are read as go-sdk's decoder reads them: exactly, after
// unescaping ("params" is not "PARAMS"; "par\u0061ms" is "params"). A
// reader that matched names otherwise (encoding/json into a struct matches
// them case-insensitively, the last one winning) could key and fingerprint
// one member while the server runs another.
func parseCall(body []byte, methods map[string]bool) (call, bool) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return call{}, false
	}
	env, repeated, err := members(body)
	if err != nil {
		return call{}, false
	}
	var version, method string
	if json.Unmarshal(env["jsonrpc"], &version) != nil || version != "2.0" {
		return call{}, false
	}
	if json.Unmarshal(env["method"], &method) != nil || !methods[method] {
		return call{}, false
	}
	rawID := env["id"]
	id, err := idem.ParseRequestID(rawID)
	if err != nil {
		if raw := bytes.TrimSpace(rawID); len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
			// A number too long or too large to key: refused with the
			// ids no server could answer (see supportedID), rather than
			// run unprotected.
			return call{rawID: compact(rawID), method: method, refusal: ReasonUnsupportedID}, true
		}
		return call{}, false // a notification, or an id nothing can key
	}
	c := call{id: id, rawID: compact(rawID), method: method}
	if !supportedID(id) {
		c.refusal = ReasonUnsupportedID
	}

	params := map[string]json.RawMessage{}
	if p := bytes.TrimSpace(env["params"]); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		var dup bool
		if p[0] != '{' {
			return call{}, false
		}
		if params, dup, err = members(p); err != nil {
			return call{}, false
		}
		repeated = repeated || dup
	}
	if raw, ok := params["name"]; ok {
		if json.Unmarshal(raw, &c.name) != nil {
			return call{}, false
		}
	} else if c.method == "tools/call" {
		return call{}, false
	}
	c.arguments = params["arguments"]
	if raw, ok := params["_meta"]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		meta, dup, err := members(raw)
		if err != nil {
			return call{}, false
		}
		repeated = repeated || dup
		c.meta = compact(raw)
		if s, ok := meta["sessionId"]; ok {
			_ = json.Unmarshal(s, &c.sessionID) // not a string: no session
		}
		if v, ok := meta[metaProtocolVersion]; ok {
			_ = json.Unmarshal(v, &c.metaVersion) // not a string: no version
		}
		if k, ok := meta["idempotencyKey"]; ok {
			c.hasKey = true
			if json.Unmarshal(k, &c.idemKey) != nil {
				c.idemKey = "" // not a string: ParseClientKey rejects it as empty
			}
		}
	}
	if repeated && c.refusal == "" {
		// The server resolves a repeated member one way (go-sdk: the last
		// wins), another reader may resolve it another: a call that is
		// ambiguous is not one to record an answer for.
		c.refusal = ReasonDuplicateMember
	}
	delete(params, "_meta")
	c.paramKey, c.hasParamKey = takeParamKey(params)
	c.round = takeRound(params)
	h := sha256.New()
	h.Write([]byte(c.method))
	h.Write([]byte{0})
	rest, _ := json.Marshal(params)
	if canon, err := agentkey.CanonicalJSON(rest); err == nil {
		h.Write(canon)
	} else {
		// Not canonicalisable (say, a repeated member name inside the
		// arguments): the exact bytes still tell a retry from another call.
		h.Write([]byte{1})
		h.Write(rest)
	}
	c.digest = hex.EncodeToString(h.Sum(nil))
	return c, true
}

// members reads the JSON object raw as go-sdk's decoder reads it: each
// member's name exactly as it reads after unescaping, its value raw, the
// last of a repeated name winning. repeated reports that a name occurred
// more than once. Anything but a JSON object is an error.
func members(raw []byte) (m map[string]json.RawMessage, repeated bool, err error) {
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, false, err
	}
	if m == nil { // null
		return nil, false, errNotObject
	}
	// A map keys names exactly, so fewer entries than members means a
	// name repeated (also when spelled with other escapes).
	return m, countMembers(raw) != len(m), nil
}

// countMembers counts the members of the valid JSON object raw: its commas
// outside strings at depth one, plus one unless it is empty.
func countMembers(raw []byte) int {
	n, depth, empty := 0, 0, true
	structure(raw, func(_ int, c byte) bool {
		switch c {
		case '"':
			empty = empty && depth != 1
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 1 {
				n++
			}
		}
		return true
	})
	if empty {
		return 0
	}
	return n + 1
}

var errNotObject = errors.New("not one JSON object")

func compact(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return append(json.RawMessage(nil), raw...)
	}
	return b.Bytes()
}

// wireResponse is what the wrapper needs to know of a message the inner
// handler sent: whether it is the response to the call, and how it ended.
type wireResponse struct {
	ID     json.RawMessage `json:"id"`
	Method *string         `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// responseTo reports whether msg is the JSON-RPC response to the request
// with id, and whether it is an error response.
func responseTo(msg []byte, id idem.RequestID) (isResponse, isError bool) {
	var r wireResponse
	if json.Unmarshal(msg, &r) != nil || r.Method != nil {
		return false, false
	}
	got, err := idem.ParseRequestID(r.ID)
	if err != nil || got.String() != id.String() {
		return false, false
	}
	hasErr := len(r.Error) > 0 && !bytes.Equal(r.Error, []byte("null"))
	if !hasErr && len(r.Result) == 0 {
		return false, false
	}
	return true, hasErr
}

// withID returns the recorded JSON-RPC response resp with its id replaced by
// rawID and its result marked as a replay ([ReplayedMetaKey]), compact, so
// it fits on one SSE data line.
func withID(resp []byte, rawID json.RawMessage) ([]byte, error) {
	var r wireResponse
	if err := json.Unmarshal(resp, &r); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(rawID)
	if len(r.Error) > 0 && !bytes.Equal(r.Error, []byte("null")) {
		b.WriteString(`,"error":`)
		b.Write(r.Error)
	} else {
		result, err := markReplayed(r.Result)
		if err != nil {
			return nil, err
		}
		b.WriteString(`,"result":`)
		b.Write(result)
	}
	b.WriteByte('}')
	var out bytes.Buffer
	if err := json.Compact(&out, b.Bytes()); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// markReplayed returns the JSON-RPC result object result with
// [ReplayedMetaKey]: true in its _meta (added if absent, or if not an
// object), every other member as it was and in its order. A result that is
// not an object is returned as is.
func markReplayed(result json.RawMessage) (json.RawMessage, error) {
	meta, ok := memberOf(result, "_meta")
	if !ok {
		return result, nil
	}
	meta, err := setMember(meta, ReplayedMetaKey, json.RawMessage("true"))
	if err != nil {
		return nil, err
	}
	return setMember(result, "_meta", meta)
}

// memberOf returns the value of member name of the JSON object obj, or
// null when obj has none. ok is false when obj is not an object.
func memberOf(obj json.RawMessage, name string) (value json.RawMessage, ok bool) {
	ms, err := orderedMembers(obj)
	if err != nil {
		return nil, false
	}
	for _, m := range ms {
		if m.name == name {
			return m.value, true
		}
	}
	return json.RawMessage("null"), true
}

// setMember returns the JSON object obj with member name set to value: in
// its place if obj has it, else last. An obj that is not an object (null,
// absent) counts as the empty object.
func setMember(obj json.RawMessage, name string, value json.RawMessage) (json.RawMessage, error) {
	ms, err := orderedMembers(obj)
	if err != nil {
		ms = nil
	}
	set := false
	for i := range ms {
		if ms[i].name == name {
			ms[i].value, set = value, true
		}
	}
	if !set {
		ms = append(ms, member{name: name, value: value})
	}
	var out bytes.Buffer
	out.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			out.WriteByte(',')
		}
		name, err := json.Marshal(m.name)
		if err != nil {
			return nil, err
		}
		out.Write(name)
		out.WriteByte(':')
		out.Write(m.value)
	}
	out.WriteByte('}')
	return out.Bytes(), nil
}

// member is one member of a JSON object, in the order read.
type member struct {
	name  string
	value json.RawMessage
}

// orderedMembers reads the members of the JSON object raw in order. A
// repeated name is kept once, where it first occurred, with its last value,
// as a decoder that lets the last one win reads it.
func orderedMembers(raw json.RawMessage) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errNotObject
	}
	var ms []member
	at := map[string]int{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if i, ok := at[name]; ok {
			ms[i].value = v
			continue
		}
		at[name] = len(ms)
		ms = append(ms, member{name: name, value: v})
	}
	return ms, nil
}
