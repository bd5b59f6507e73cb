package userauth

import (
	"context"
	"errors"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/internal/usergrants"
)

// Handler serves the person's pages: GET and POST AuthorizePath{id} (the code, then the
// redirect to the authorization server) and GET CallbackPath. Mount it on the gateway's
// listener at both paths.
func (b *Broker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+AuthorizePath+"{id}", b.servePage)
	mux.HandleFunc("POST "+AuthorizePath+"{id}", b.serveCode)
	mux.HandleFunc("GET "+CallbackPath, b.serveCallback)
	return mux
}

var page = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Switchboard authorization</title></head>
<body><h1>{{.Title}}</h1><p>{{.Text}}</p>
{{if .Form}}<form method="post"><label>Code <input name="code" autocomplete="one-time-code" autofocus></label> <button type="submit">Continue</button></form>{{end}}
</body></html>
`))

type pageData struct {
	Title, Text string
	Form        bool
}

// headers sets what every page sends: no caching, no referrer (the callback's URL holds
// a code), no framing, no script.
func headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
	h.Set("Content-Type", "text/html; charset=utf-8")
}

func render(w http.ResponseWriter, status int, d pageData) {
	headers(w)
	w.WriteHeader(status)
	_ = page.Execute(w, d)
}

func (b *Broker) refused(w http.ResponseWriter, step string, r *refusal) {
	b.log().Info("Authorization step refused", "step", step, "reason", r.reason)
	render(w, r.status, pageData{Title: "Authorization refused", Text: r.text})
}

// validID reports whether id looks like one Start made (43 base64url characters).
func validID(id string) bool {
	if len(id) != 43 {
		return false
	}
	for _, c := range id {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// servePage shows the page that asks for the code.
func (b *Broker) servePage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !validID(id) {
		b.refused(w, "page", refuse(http.StatusNotFound, "malformed", "This authorization link is not one Switchboard made."))
		return
	}
	f, _, rf := b.load(r.Context(), id)
	if rf != nil {
		b.refused(w, "page", rf)
		return
	}
	if f.Stage != stageNew {
		b.refused(w, "page", refuse(http.StatusGone, "used", "This authorization link was used already. Call the tool again for a new one."))
		return
	}
	render(w, http.StatusOK, pageData{
		Title: "Authorize " + f.server().String(),
		Text: "Switchboard will act as " + f.Username + " at server " + f.server().String() +
			" with your own account there. If you are not " + f.Username + ", close this page. Otherwise enter the code your MCP client shows.",
		Form: true,
	})
}

// serveCode checks the code and sends the browser to the authorization server.
func (b *Broker) serveCode(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	if !validID(id) {
		b.refused(w, "code", refuse(http.StatusNotFound, "malformed", "This authorization link is not one Switchboard made."))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		b.refused(w, "code", refuse(http.StatusBadRequest, "malformed", "The form could not be read."))
		return
	}
	f, bl, rf := b.load(ctx, id)
	if rf != nil {
		b.refused(w, "code", rf)
		return
	}
	if f.Stage != stageNew {
		b.refused(w, "code", refuse(http.StatusGone, "used", "This authorization link was used already. Call the tool again for a new one."))
		return
	}
	if !sameDigest(normalizeCode(r.PostForm.Get("code")), f.CodeHash) {
		f.Attempts++
		if f.Attempts >= maxCodeAttempts {
			_ = b.Flows.Delete(ctx, bl.Name, bl.Version)
			b.refused(w, "code", refuse(http.StatusForbidden, "too-many-codes", "Too many wrong codes: this link no longer works. Call the tool again for a new one."))
			return
		}
		if err := b.update(ctx, id, bl, f); err != nil {
			b.refused(w, "code", refuse(http.StatusConflict, "conflict", "This authorization changed meanwhile; reload the page."))
			return
		}
		render(w, http.StatusForbidden, pageData{Title: "Wrong code", Text: "That is not the code your MCP client shows. Try again.", Form: true})
		return
	}
	auth := b.Authorizer(f.server())
	if auth == nil {
		b.refused(w, "code", refuse(http.StatusGone, "server-gone", "Server "+f.server().String()+" no longer takes per-person authorization."))
		return
	}
	nonce, browser, verifier := randomText(32), randomText(32), newVerifier()
	authz, e := auth.AuthorizationURL(connector.AuthorizationRequest{
		Caller: f.caller(), State: id + "." + nonce, Verifier: verifier, RedirectURL: b.RedirectURL(),
	})
	if e != nil {
		b.log().Info("Authorization cannot start", "server", f.server().String(), "reason", e.Reason, "message", e.Message)
		b.refused(w, "code", refuse(http.StatusBadGateway, e.Reason, "The server's authorization server cannot be used: "+e.Message))
		return
	}
	f.Stage, f.Verifier, f.StateHash, f.BrowserHash, f.Issuer = stageSent, verifier, digest(nonce), digest(browser), authz.Issuer
	f.ClientID, f.ClientSecret = authz.Client.ID, authz.Client.Secret
	authURL := authz.URL
	if err := b.update(ctx, id, bl, f); err != nil {
		// Another request moved the flow on first: only one browser proceeds.
		b.refused(w, "code", refuse(http.StatusConflict, "conflict", "This authorization is already under way elsewhere."))
		return
	}
	// Secure whenever the public URL is https; a plain http public URL serves a loopback
	// address only (tests, switchboard dev). Lax: the authorization server's redirect
	// back is a top-level navigation from another site.
	http.SetCookie(w, &http.Cookie{ //nolint:gosec // Secure follows the public URL's scheme, see above
		Name: cookieName(id), Value: browser, Path: CallbackPath, HttpOnly: true,
		Secure: b.secure(), SameSite: http.SameSiteLaxMode,
		MaxAge: int(time.Until(f.Expires).Seconds()) + 1,
	})
	headers(w)
	http.Redirect(w, r, authURL, http.StatusSeeOther)
}

// update writes f back if the Secret is still at bl's version.
func (b *Broker) update(ctx context.Context, id string, bl *usergrants.Blob, f *flow) error {
	sealed, err := b.seal(ctx, id, f)
	if err != nil {
		return err
	}
	next := *bl
	next.Sealed = sealed
	return b.Flows.Update(ctx, usergrants.KindFlow, next)
}

// cookieName is the cookie of flow id's browser, one per flow.
func cookieName(id string) string {
	return "switchboard_oauth_" + usergrants.Digest("cookie", id)[:16]
}

// serveCallback finishes an authorization: the state must be a flow's that is under
// way, the browser the one that entered the code; the flow is consumed (once, on one
// replica), the code exchanged by the connector and the grant stored.
func (b *Broker) serveCallback(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	state := q.Get("state")
	id, nonce, ok := strings.Cut(state, ".")
	if len(state) > maxStateLen || !ok || !validID(id) || len(q["state"]) != 1 || len(q["code"]) > 1 || len(q["iss"]) > 1 {
		b.refused(w, "callback", refuse(http.StatusBadRequest, "malformed-state", "This is not an authorization Switchboard started."))
		return
	}
	f, bl, rf := b.load(ctx, id)
	if rf != nil {
		b.refused(w, "callback", rf)
		return
	}
	if f.Stage != stageSent || !sameDigest(nonce, f.StateHash) {
		b.refused(w, "callback", refuse(http.StatusBadRequest, "state-mismatch", "This is not an authorization Switchboard started."))
		return
	}
	cookie, err := r.Cookie(cookieName(id))
	if err != nil || !sameDigest(cookie.Value, f.BrowserHash) {
		b.refused(w, "callback", refuse(http.StatusForbidden, "other-browser",
			"This browser did not start this authorization: open the link from your MCP client in the browser you authorize with."))
		return
	}
	// Single use: of two callbacks (a replay, another replica) only one deletes it.
	if err := b.Flows.Delete(ctx, bl.Name, bl.Version); err != nil {
		status, reason := http.StatusGone, "used"
		if !errors.Is(err, usergrants.ErrConflict) && !errors.Is(err, usergrants.ErrNotFound) {
			status, reason = http.StatusServiceUnavailable, "unavailable"
		}
		b.refused(w, "callback", refuse(status, reason, "This authorization was used already. Call the tool again for a new one."))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName(id), Value: "", Path: CallbackPath, MaxAge: -1, HttpOnly: true, //nolint:gosec // as the cookie it removes
		Secure: b.secure(), SameSite: http.SameSiteLaxMode})
	if code := q.Get("error"); code != "" {
		b.refused(w, "callback", refuse(http.StatusForbidden, "refused-at-authorization-server",
			"The authorization server did not authorize Switchboard ("+safeWord(code)+"). Call the tool again to retry."))
		return
	}
	auth := b.Authorizer(f.server())
	if auth == nil {
		b.refused(w, "callback", refuse(http.StatusGone, "server-gone", "Server "+f.server().String()+" no longer takes per-person authorization."))
		return
	}
	e := auth.Complete(ctx, connector.Completion{
		Caller: f.caller(), Username: f.Username, Code: q.Get("code"), Verifier: f.Verifier,
		RedirectURL: b.RedirectURL(), Issuer: f.Issuer, Iss: q.Get("iss"),
		Client: connector.OAuthClient{ID: f.ClientID, Secret: f.ClientSecret},
	})
	if e != nil {
		b.log().Info("Authorization refused", "server", f.server().String(), "username", f.Username, "reason", e.Reason, "message", e.Message)
		render(w, http.StatusBadGateway, pageData{Title: "Authorization failed", Text: e.Message + " Nothing was stored; call the tool again to retry."})
		return
	}
	b.log().Info("Authorization completed", "server", f.server().String(), "username", f.Username)
	done := Completed{ElicitationID: f.ElicitationID, CallerKey: f.CallerKey, Server: f.server()}
	b.mu.Lock()
	hooks := append([]func(Completed){}, b.onComplete...)
	b.mu.Unlock()
	for _, fn := range hooks {
		fn(done)
	}
	render(w, http.StatusOK, pageData{Title: "Authorized", Text: "Switchboard now acts as " + f.Username + " at server " + f.server().String() + ". You can close this window and return to your MCP client."})
}

// safeWord keeps an OAuth error code's characters (RFC 6749: %x20-21 / %x23-5B /
// %x5D-7E), at most 64.
func safeWord(s string) string {
	var sb strings.Builder
	for _, c := range s {
		if sb.Len() >= 64 {
			break
		}
		if c > 0x20 && c < 0x7f && c != '"' && c != '\\' {
			sb.WriteRune(c)
		}
	}
	return sb.String()
}

// secure reports whether the broker's cookies are Secure: whenever its public URL is https.
func (b *Broker) secure() bool { return strings.HasPrefix(b.PublicURL, "https://") }
