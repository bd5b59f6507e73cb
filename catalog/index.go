package catalog

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode"
)

// Search limits. A query has at most maxTerms distinct terms; longer words are cut.
const (
	maxTerms     = 16
	maxWordBytes = 64
	// minPrefixBytes is the shortest term that also matches longer tokens.
	minPrefixBytes = 2
)

// field says where a term matched. The order of the bits is the ranking order: a match
// in a tool's name ranks above one in its title, above one in its description, above one
// in its server's name or description.
type field uint8

const (
	fieldServer field = 1 << iota
	fieldDescription
	fieldTitle
	fieldName

	// allFields are the bits a postingMark keeps in 4 bits; a field added above must be
	// added here, and the array below stops compiling once they need a fifth bit.
	allFields = fieldServer | fieldDescription | fieldTitle | fieldName
)

var _ = [1]struct{}{}[allFields>>4]

// serverKey identifies an MCPServer.
type serverKey struct {
	namespace, name string
}

func compareKeys(a, b serverKey) int {
	if c := strings.Compare(a.namespace, b.namespace); c != 0 {
		return c
	}
	return strings.Compare(a.name, b.name)
}

// serverEntry is the catalogue's immutable copy of one MCPServer. An update replaces the
// entry, so readers may keep a pointer after releasing the index lock.
type serverEntry struct {
	key    serverKey
	detail *ServerDetail
	tools  []toolEntry // sorted by name

	// positions says where each of the entry's postings sits in its token's list, so
	// that removal is a swap with the list's last item. A posting's slot indexes it:
	// the distinct tokens of every tool in order, then those of the server (entryTokens).
	// The index keeps it current under its write lock; readers never look at it.
	positions []int32
}

// ref returns the server as a tool's search result names it.
func (e *serverEntry) ref() ServerRef {
	d := e.detail
	return ServerRef{
		Namespace:   d.Namespace,
		Name:        d.Name,
		Endpoint:    d.Endpoint,
		Transport:   d.Transport,
		Ready:       d.Ready,
		GatewayPath: d.GatewayPath,
	}
}

func (e *serverEntry) postingPositions() []int32 { return e.positions }

// toolEntry is one tool of a serverEntry.
type toolEntry struct {
	server *serverEntry
	tool   *Tool
	lname  string // tool name in lower case

	// pos is the entry's position in index.toolList, so that ordering and accumulating
	// search results work on integers. The index keeps it current under its write lock;
	// read it only under the index lock.
	pos int
}

func (t *toolEntry) postingPositions() []int32 { return t.server.positions }

// newToolEntries returns the entries of e's tools, which must be sorted by name.
func newToolEntries(e *serverEntry, tools []Tool) []toolEntry {
	entries := make([]toolEntry, len(tools))
	for i := range tools {
		// ToLower returns the name itself when it has no upper-case letter.
		entries[i] = toolEntry{server: e, tool: &tools[i], lname: strings.ToLower(tools[i].Name)}
	}
	return entries
}

// sortedDistinctTools sorts tools by name in place and drops all but the first of each
// name (a stable sort keeps duplicates in their order); it returns what is left.
func sortedDistinctTools(tools []Tool) []Tool {
	slices.SortStableFunc(tools, func(a, b Tool) int { return strings.Compare(a.Name, b.Name) })
	return slices.CompactFunc(tools, func(a, b Tool) bool { return a.Name == b.Name })
}

// postingItem is what a posting list holds: a tool or a server, which keeps the
// positions of its postings in their lists (serverEntry.positions).
type postingItem interface {
	comparable
	postingPositions() []int32
}

// postings maps a token to what contains it.
type postings[T postingItem] struct {
	lists map[string]*postingList[T]
	vocab []string // sorted tokens with a non-empty list, for prefix search
}

// postingList holds the items of one token, and for each the fields it occurs in and
// its slot, in two parallel slices: searches iterate them fast, and a posting costs 12
// bytes where a struct of both would take 16. Each item knows where its posting is, so
// that removal is a swap with the last item; a map from item to position would cost far
// more than the posting, for every token of every tool.
type postingList[T postingItem] struct {
	items []T
	marks []postingMark
}

// postingMark is a posting's slot, the index of its position in the item's
// postingPositions(), shifted left by 4, and the fields its token occurs in. Slots stay
// far below 2^28: an entry's tokens come from one Kubernetes object.
type postingMark uint32

func newPostingMark(slot uint32, f field) postingMark { return postingMark(slot<<4 | uint32(f)) }

func (m postingMark) slot() uint32 { return uint32(m >> 4) }

func (m postingMark) field() field { return field(m & 0xf) }

func newPostings[T postingItem]() postings[T] {
	return postings[T]{lists: make(map[string]*postingList[T])}
}

// add adds item to token's list, found in fields f, and records its position in the
// item's slot. An item is added once per distinct token: its caller merges the fields
// first (entryTokens).
func (p *postings[T]) add(token string, item T, slot uint32, f field) {
	list, ok := p.lists[token]
	if !ok {
		list = &postingList[T]{}
		p.lists[token] = list
		i, _ := slices.BinarySearch(p.vocab, token)
		p.vocab = slices.Insert(p.vocab, i, token)
	}
	item.postingPositions()[slot] = int32(len(list.items)) //nolint:gosec // a list holds far fewer than 2^31 items
	list.items = append(list.items, item)
	list.marks = append(list.marks, newPostingMark(slot, f))
}

// remove removes item, added with slot, from token's list. A list left empty is dropped
// with its token.
func (p *postings[T]) remove(token string, item T, slot uint32) {
	list, ok := p.lists[token]
	if !ok {
		return
	}
	i := item.postingPositions()[slot]
	if int(i) >= len(list.items) || list.items[i] != item {
		return
	}
	last := len(list.items) - 1
	moved, mark := list.items[last], list.marks[last]
	list.items[i], list.marks[i] = moved, mark
	moved.postingPositions()[mark.slot()] = i
	var none T
	list.items[last] = none
	list.items, list.marks = list.items[:last], list.marks[:last]
	switch {
	case last == 0:
		delete(p.lists, token)
		if i, found := slices.BinarySearch(p.vocab, token); found {
			p.vocab = slices.Delete(p.vocab, i, i+1)
		}
	case last < cap(list.items)/4:
		// Give back what a shrunken fleet no longer needs.
		list.items, list.marks = slices.Clone(list.items), slices.Clone(list.marks)
	}
}

// prefix calls fn for every item with a token that starts with term. A term shorter
// than minPrefixBytes matches whole tokens only: a single letter would otherwise match
// most of the vocabulary.
func (p *postings[T]) prefix(term string, fn func(T, field)) {
	if len(term) < minPrefixBytes {
		if list, ok := p.lists[term]; ok {
			list.each(fn)
		}
		return
	}
	for i := sort.SearchStrings(p.vocab, term); i < len(p.vocab) && strings.HasPrefix(p.vocab[i], term); i++ {
		p.lists[p.vocab[i]].each(fn)
	}
}

func (l *postingList[T]) each(fn func(T, field)) {
	marks := l.marks[:len(l.items)]
	for i, item := range l.items {
		fn(item, marks[i].field())
	}
}

// index is the catalogue's in-memory view of every MCPServer, kept in stable order and
// with inverted indexes for search. Informer events update it one server at a time.
type index struct {
	mu         sync.RWMutex
	servers    map[serverKey]*serverEntry
	serverList []*serverEntry // sorted by key
	toolList   []*toolEntry   // sorted by namespace, server and tool name; a server's tools are contiguous
	tools      postings[*toolEntry]
	serverText postings[*serverEntry]
	namespaces map[string]int // servers per namespace
	nsList     []string       // sorted namespaces; replaced, never modified in place

	// onChange, when set, is called with the index size after every change, under the lock.
	onChange func(servers, tools, tokens int)
}

func newIndex() *index {
	return &index{
		servers:    make(map[serverKey]*serverEntry),
		tools:      newPostings[*toolEntry](),
		serverText: newPostings[*serverEntry](),
		namespaces: make(map[string]int),
	}
}

// upsert adds or replaces a server.
func (ix *index) upsert(e *serverEntry) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if old, ok := ix.servers[e.key]; ok {
		ix.removeLocked(old)
	}
	ix.insertLocked(e)
	ix.changedLocked()
}

// delete removes a server if it is present.
func (ix *index) delete(key serverKey) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if old, ok := ix.servers[key]; ok {
		ix.removeLocked(old)
		ix.changedLocked()
	}
}

func (ix *index) changedLocked() {
	if ix.onChange != nil {
		ix.onChange(len(ix.serverList), len(ix.toolList), len(ix.tools.vocab)+len(ix.serverText.vocab))
	}
}

func searchServer(list []*serverEntry, key serverKey) (int, bool) {
	return slices.BinarySearchFunc(list, key, func(e *serverEntry, k serverKey) int { return compareKeys(e.key, k) })
}

// firstToolOf returns the position of the first tool of key's server in toolList, or
// where its tools would go.
func (ix *index) firstToolOf(key serverKey) int {
	i, _ := slices.BinarySearchFunc(ix.toolList, key, func(t *toolEntry, k serverKey) int {
		return compareKeys(t.server.key, k)
	})
	return i
}

// renumberLocked sets pos on every tool from position from on.
func (ix *index) renumberLocked(from int) {
	for i := from; i < len(ix.toolList); i++ {
		ix.toolList[i].pos = i
	}
}

func (ix *index) insertLocked(e *serverEntry) {
	ix.servers[e.key] = e
	i, _ := searchServer(ix.serverList, e.key)
	ix.serverList = slices.Insert(ix.serverList, i, e)
	first := ix.firstToolOf(e.key)
	ix.toolList = slices.Insert(ix.toolList, first, make([]*toolEntry, len(e.tools))...)
	for i := range e.tools {
		ix.toolList[first+i] = &e.tools[i]
	}
	ix.renumberLocked(first)
	toks, release := pooledEntryTokens(e)
	defer release()
	e.positions = make([]int32, len(toks))
	for slot, tok := range toks {
		if tok.tool < 0 {
			ix.serverText.add(tok.text, e, uint32(slot), fieldServer) //nolint:gosec // slots are indexes
		} else {
			ix.tools.add(tok.text, &e.tools[tok.tool], uint32(slot), tok.f) //nolint:gosec // slots are indexes
		}
	}
	if ix.namespaces[e.key.namespace]++; ix.namespaces[e.key.namespace] == 1 {
		ix.rebuildNamespacesLocked()
	}
}

func (ix *index) removeLocked(e *serverEntry) {
	delete(ix.servers, e.key)
	if i, ok := searchServer(ix.serverList, e.key); ok {
		ix.serverList = slices.Delete(ix.serverList, i, i+1)
	}
	lo := ix.firstToolOf(e.key)
	ix.toolList = slices.Delete(ix.toolList, lo, lo+len(e.tools))
	ix.renumberLocked(lo)
	toks, release := pooledEntryTokens(e)
	defer release()
	for slot, tok := range toks {
		if tok.tool < 0 {
			ix.serverText.remove(tok.text, e, uint32(slot)) //nolint:gosec // slots are indexes
		} else {
			ix.tools.remove(tok.text, &e.tools[tok.tool], uint32(slot)) //nolint:gosec // slots are indexes
		}
	}
	if ix.namespaces[e.key.namespace]--; ix.namespaces[e.key.namespace] <= 0 {
		delete(ix.namespaces, e.key.namespace)
		ix.rebuildNamespacesLocked()
	}
}

func (ix *index) rebuildNamespacesLocked() {
	list := make([]string, 0, len(ix.namespaces))
	for ns := range ix.namespaces {
		list = append(list, ns)
	}
	slices.Sort(list)
	ix.nsList = list
}

// Namespaces returns the sorted namespaces that hold at least one server. The slice
// must not be modified.
func (ix *index) Namespaces() []string {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.nsList
}

// get returns one server.
func (ix *index) get(key serverKey) (*serverEntry, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	e, ok := ix.servers[key]
	return e, ok
}

// listServers returns up to limit servers after the cursor key (or from the start when
// after is nil) that keep passes, and whether more follow.
func (ix *index) listServers(after *serverKey, limit int, keep func(*serverEntry) bool) ([]*serverEntry, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	start := 0
	if after != nil {
		i, found := searchServer(ix.serverList, *after)
		if found {
			i++
		}
		start = i
	}
	var out []*serverEntry
	for _, e := range ix.serverList[start:] {
		if !keep(e) {
			continue
		}
		if len(out) == limit {
			return out, true
		}
		out = append(out, e)
	}
	return out, false
}

// match is one ranked search result.
type match struct {
	tool  *toolEntry
	score int64
}

// toolCursor is the position after which a page of search results starts: the score
// and key of the last result of the previous page.
type toolCursor struct {
	score int64
	key   serverKey
	tool  string
}

// compareToolKey orders a tool against a (server, tool name) key.
func compareToolKey(t *toolEntry, key serverKey, tool string) int {
	if c := compareKeys(t.server.key, key); c != 0 {
		return c
	}
	return strings.Compare(t.tool.Name, tool)
}

// boundary resolves a cursor against the current tool list: a match comes after the
// cursor when its score is lower, or equal with a position at or past the returned one.
// This holds even when the cursor's own tool has since been removed.
func (ix *index) boundaryLocked(c *toolCursor) int {
	i, found := slices.BinarySearchFunc(ix.toolList, c, func(t *toolEntry, c *toolCursor) int {
		return compareToolKey(t, c.key, c.tool)
	})
	if found {
		i++
	}
	return i
}

func afterCursor(m match, c *toolCursor, boundary int) bool {
	return m.score < c.score || (m.score == c.score && m.tool.pos >= boundary)
}

// accumulator collects, per tool position, the fields each query term matched in (four
// bits per term). It is pooled: a search touches few tools out of many.
type accumulator struct {
	bits    []uint64
	touched []int
}

var accumulators = sync.Pool{New: func() any { return new(accumulator) }}

func (a *accumulator) add(pos int, bits uint64) {
	if a.bits[pos] == 0 {
		a.touched = append(a.touched, pos)
	}
	a.bits[pos] |= bits
}

// searchTools returns up to limit tools that match every term of q and pass keep, best
// first, starting after the cursor, and whether more follow. Without terms every tool
// that passes keep matches, in stable order.
func (ix *index) searchTools(q parsedQuery, after *toolCursor, limit int, keep func(*toolEntry) bool) ([]match, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	boundary := 0
	if after != nil {
		boundary = ix.boundaryLocked(after)
	}
	if len(q.terms) == 0 {
		return ix.scanToolsLocked(after, boundary, limit, keep)
	}
	acc := accumulators.Get().(*accumulator)
	defer accumulators.Put(acc)
	if len(acc.bits) < len(ix.toolList) {
		acc.bits = make([]uint64, len(ix.toolList))
	}
	acc.touched = acc.touched[:0]
	for i, term := range q.terms {
		shift := uint(4 * i)
		ix.tools.prefix(term, func(t *toolEntry, f field) { acc.add(t.pos, uint64(f)<<shift) })
		ix.serverText.prefix(term, func(e *serverEntry, f field) {
			for i := range e.tools {
				acc.add(e.tools[i].pos, uint64(f)<<shift)
			}
		})
	}
	// Rank keys sort best first: the inverted score in the high half, the position (the
	// catalogue's stable order) in the low half, so a plain integer sort ranks.
	keys := make([]uint64, 0, len(acc.touched))
	for _, pos := range acc.touched {
		bits := acc.bits[pos]
		acc.bits[pos] = 0
		score, ok := scoreBits(bits, len(q.terms))
		if !ok {
			continue
		}
		t := ix.toolList[pos]
		if t.lname == q.lower {
			score += weightExactName
		}
		if (after != nil && !afterCursor(match{tool: t, score: score}, after, boundary)) || !keep(t) {
			continue
		}
		keys = append(keys, rankKey(score, pos))
	}
	slices.Sort(keys)
	more := len(keys) > limit
	if more {
		keys = keys[:limit]
	}
	matches := make([]match, len(keys))
	for i, k := range keys {
		matches[i] = match{tool: ix.toolList[k&(1<<32-1)], score: maxScore - int64(k>>32)}
	}
	return matches, more
}

// rankKey packs a score (0 to maxScore) and a position (below 2^32) into one integer
// that sorts best first.
func rankKey(score int64, pos int) uint64 {
	inverted := uint64(min(max(maxScore-score, 0), maxScore)) //nolint:gosec // clamped to [0, maxScore]
	return inverted<<32 | uint64(pos)&(1<<32-1)               //nolint:gosec // positions are non-negative
}

func (ix *index) scanToolsLocked(after *toolCursor, boundary, limit int, keep func(*toolEntry) bool) ([]match, bool) {
	start := 0
	if after != nil {
		start = sort.Search(len(ix.toolList), func(i int) bool {
			return afterCursor(match{tool: ix.toolList[i]}, after, boundary)
		})
	}
	var out []match
	for _, t := range ix.toolList[start:] {
		if !keep(t) {
			continue
		}
		if len(out) == limit {
			return out, true
		}
		out = append(out, match{tool: t})
	}
	return out, false
}

// Score weights: every term counts once, in the best field it matched; a tool whose name
// equals the whole query ranks first.
const (
	weightServer      = 1
	weightDescription = 1 << 5
	weightTitle       = 1 << 10
	weightName        = 1 << 15
	weightExactName   = 1 << 20

	// maxScore bounds every score: maxTerms name matches plus the exact-name bonus.
	maxScore = weightExactName + maxTerms*weightName
)

// scoreBits scores the accumulated fields of terms terms, and reports false when some
// term matched nowhere.
func scoreBits(bits uint64, terms int) (int64, bool) {
	var score int64
	for i := range terms {
		f := field(bits >> uint(4*i) & 0xf)
		switch {
		case f&fieldName != 0:
			score += weightName
		case f&fieldTitle != 0:
			score += weightTitle
		case f&fieldDescription != 0:
			score += weightDescription
		case f&fieldServer != 0:
			score += weightServer
		default:
			return 0, false
		}
	}
	return score, true
}

// parsedQuery is a search query split into lower-case terms.
type parsedQuery struct {
	raw   string
	lower string // raw in lower case, compared with tool names for the exact-name bonus
	terms []string
}

// parseQuery splits q into at most maxTerms distinct lower-case terms.
func parseQuery(q string) parsedQuery {
	pq := parsedQuery{raw: strings.TrimSpace(q)}
	pq.lower = strings.ToLower(pq.raw)
	for _, w := range splitWords(q) {
		w = strings.ToLower(w)
		if !slices.Contains(pq.terms, w) {
			pq.terms = append(pq.terms, w)
		}
		if len(pq.terms) == maxTerms {
			break
		}
	}
	return pq
}

// entryToken is a distinct token of one of a server's tools, or of the server itself.
type entryToken struct {
	text string
	f    field // the fields of the tool the token occurs in
	tool int   // index in serverEntry.tools, or -1 for the server's own name and description
}

// tokenBufs holds the buffers of pooledEntryTokens: an insert or removal needs an
// entry's tokens only while it runs.
var tokenBufs = sync.Pool{New: func() any { return new([]entryToken) }}

// pooledEntryTokens returns entryTokens(e) in a pooled buffer, and the function that
// returns the buffer to the pool once the tokens are no longer used.
func pooledEntryTokens(e *serverEntry) ([]entryToken, func()) {
	buf := tokenBufs.Get().(*[]entryToken)
	toks := entryTokens(e, (*buf)[:0])
	return toks, func() {
		clear(toks) // let go of the entry's strings
		*buf = toks[:0]
		tokenBufs.Put(buf)
	}
}

// entryTokens returns the distinct tokens of each of e's tools (name, title and
// description, the fields merged), then those of e's name, description and title. Its
// order numbers the entry's postings, so it must not change while e is in the index. It
// appends to out.
func entryTokens(e *serverEntry, out []entryToken) []entryToken {
	for i := range e.tools {
		t := e.tools[i].tool
		first := len(out)
		for _, text := range []struct {
			s string
			f field
		}{{t.Name, fieldName}, {t.Title, fieldTitle}, {t.Description, fieldDescription}} {
			for _, tok := range tokens(text.s) {
				if k := slices.IndexFunc(out[first:], func(et entryToken) bool { return et.text == tok }); k >= 0 {
					out[first+k].f |= text.f
				} else {
					out = append(out, entryToken{text: tok, f: text.f, tool: i})
				}
			}
		}
	}
	text := e.key.name + " " + e.detail.Description
	if e.detail.ServerInfo != nil {
		text += " " + e.detail.ServerInfo.Title
	}
	for _, tok := range tokens(text) {
		out = append(out, entryToken{text: tok, f: fieldServer, tool: -1})
	}
	return out
}

// tokens returns the distinct lower-case tokens of text: its words (runs of letters and
// digits), and the parts of camelCase words as well.
func tokens(text string) []string {
	var out []string
	add := func(tok string) {
		tok = strings.ToLower(tok)
		if !slices.Contains(out, tok) {
			out = append(out, tok)
		}
	}
	for _, w := range splitWords(text) {
		add(w)
		if parts := splitCamel(w); len(parts) > 1 {
			for _, p := range parts {
				add(p)
			}
		}
	}
	return out
}

// splitWords returns the runs of letters and digits in s, each cut to maxWordBytes.
func splitWords(s string) []string {
	words := strings.FieldsFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	for i, w := range words {
		if len(w) > maxWordBytes {
			w = w[:maxWordBytes]
			for len(w) > 0 && !utf8ValidEnd(w) {
				w = w[:len(w)-1]
			}
			words[i] = w
		}
	}
	return words
}

func utf8ValidEnd(s string) bool {
	return strings.ToValidUTF8(s, "") == s
}

// splitCamel splits "getUserInfo" into "get", "User", "Info".
func splitCamel(w string) []string {
	var parts []string
	start := 0
	runes := []rune(w)
	for i := 1; i < len(runes); i++ {
		if unicode.IsUpper(runes[i]) && !unicode.IsUpper(runes[i-1]) {
			parts = append(parts, string(runes[start:i]))
			start = i
		}
	}
	return append(parts, string(runes[start:]))
}
