// Auth on a keyed server. A browser cannot set headers on a WebSocket, so the page connects with `?token=`:
// either the token it was opened with (`/?token=...`, e.g. minted by a backend) or one it mints itself from
// an API key typed into the page (POST /v1/tokens with `Authorization: Bearer KEY`), renewed a minute before
// it expires. The key stays in this page's memory only.

const RENEW_BEFORE_MS = 60_000;

export class Auth {
  constructor() {
    this.token = new URL(location.href).searchParams.get("token");
    this.key = null;
    this.expiresAtMs = null;
  }

  /** `url` with `?token=` when there is one. */
  withToken(url) {
    if (this.token) url.searchParams.set("token", this.token);
    return url;
  }

  fetch(path, init) {
    return fetch(this.withToken(new URL(path, location.href)), init);
  }

  /** Mints a token from an API key; throws an Error with the server's message when it is refused. */
  async mint(key) {
    const response = await fetch("/v1/tokens", { method: "POST", headers: { authorization: `Bearer ${key}` } });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(body.error?.message || `HTTP ${response.status}`);
    this.key = key;
    this.token = body.token;
    this.expiresAtMs = body.expires_at * 1000;
  }

  /** Before connecting: a minted token near its end is renewed (a token from the URL cannot be). */
  async fresh() {
    if (this.key && this.expiresAtMs && Date.now() > this.expiresAtMs - RENEW_BEFORE_MS) await this.mint(this.key);
  }
}
