// The OpenID provider sallyport's OAuth tests run against: oidc-provider (OpenID certified),
// started by the Rust rig (`sallyport_tests::oidc`) as `node provider.mjs`.
//
// It listens on 127.0.0.1 at a free port and prints one JSON line per event on stdout:
//   {"event":"listening","issuer":"http://127.0.0.1:PORT"}      once, when it serves
//   {"event":"token","grant_type":"refresh_token"}              every token issued (with
//                                                               `code_verifier` for an
//                                                               authorization code)
//   {"event":"reuse_detected","grant_type":"refresh_token"}     a rotated refresh token
//                                                               presented again: the
//                                                               provider revoked the grant
//   {"event":"grant_error","error":"invalid_grant"}             any other refused grant
//   {"event":"revoked"}                                         a grant revoked through the
//                                                               revocation endpoint (RFC 7009)
//
// Configuration (environment):
//   OIDC_TOKEN_TTL  access token lifetime in seconds (default 4)
//
// What it is configured with: PKCE (S256) required for every authorization request;
// refresh tokens rotated on every use, with reuse detection (oidc-provider revokes the whole
// grant when a consumed refresh token is used again); the client credentials grant; token
// revocation and introspection. Instead of a login page, `/interaction/:uid` approves every
// request at once for the account named by `login_hint` (default `alice`) with the scopes
// asked for, so a test obtains an authorization code over plain HTTP: GET /auth?... and
// follow the redirects (carrying the cookies) to the redirect URI. The account `refuse`
// refuses instead: the redirect then carries `error=access_denied`.
//
// The console's OpenID Connect login uses the client `console-login` with the scopes
// `openid profile groups`: the ID token then carries `name`, `preferred_username` and
// `groups` of the accounts in ACCOUNTS (alice is "Alice Approver" in group `approvers`);
// any other account has its `sub` only.
import http from 'node:http';
import Provider from 'oidc-provider';

const ttl = Number.parseInt(process.env.OIDC_TOKEN_TTL ?? '4', 10);
const emit = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);

const server = http.createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const { port } = server.address();
const issuer = `http://127.0.0.1:${port}`;

// The accounts with claims beyond their `sub` (the console's login reads them).
const ACCOUNTS = {
  alice: { name: 'Alice Approver', preferred_username: 'alice', groups: ['approvers'] },
  bob: { name: 'Bob Builder', preferred_username: 'bob', groups: ['builders', 'approvers'] },
};

const provider = new Provider(issuer, {
  findAccount: async (ctx, id) => ({
    accountId: id,
    claims: async () => ({ sub: id, ...(ACCOUNTS[id] ?? {}) }),
  }),
  clients: [
    {
      // Client credentials (RFC 6749 §4.4).
      client_id: 'machine',
      client_secret: 'machine-secret-canary-7f3a',
      grant_types: ['client_credentials'],
      response_types: [],
      redirect_uris: [],
      scope: 'api:read',
    },
    {
      // Authorization code + PKCE, with refresh tokens. A native client (RFC 8252): its
      // loopback redirect URIs match on any port (oidc-provider compares them without the
      // port), so `sallyport credentials connect` listens on 127.0.0.1:0 and the console's
      // connect page on its own port.
      client_id: 'webapp',
      client_secret: 'webapp-secret-canary-91c2',
      application_type: 'native',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      redirect_uris: ['http://127.0.0.1/callback', 'http://127.0.0.1/connect/callback'],
      scope: 'openid offline_access api:read',
    },
    {
      // The console's OpenID Connect login: authorization code + PKCE, a confidential
      // native client (its loopback redirect URI matches on any port, as `webapp`'s).
      client_id: 'console-login',
      client_secret: 'console-secret-canary-3b8e',
      application_type: 'native',
      grant_types: ['authorization_code'],
      response_types: ['code'],
      redirect_uris: ['http://127.0.0.1/login/oidc/callback'],
      scope: 'openid profile groups',
    },
    {
      // The resource server: introspects the tokens it receives.
      client_id: 'api',
      client_secret: 'api-secret-canary-55d0',
      grant_types: [],
      response_types: [],
      redirect_uris: [],
    },
  ],
  scopes: ['openid', 'offline_access', 'api:read', 'profile', 'groups'],
  claims: {
    acr: null,
    sid: null,
    auth_time: null,
    iss: null,
    openid: ['sub'],
    profile: ['name', 'preferred_username'],
    groups: ['groups'],
  },
  // The scopes' claims go into the ID token too (not only to the userinfo endpoint): the
  // console's login reads the approver's name and groups from the ID token.
  conformIdTokenClaims: false,
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    introspection: { enabled: true, allowedPolicy: async (ctx, client) => client.clientId === 'api' },
    revocation: { enabled: true },
  },
  pkce: { required: () => true },
  rotateRefreshToken: true,
  cookies: { keys: ['sallyport-test-cookie-key'] },
  ttl: {
    AccessToken: ttl,
    ClientCredentials: ttl,
    AuthorizationCode: 60,
    IdToken: 3600,
    RefreshToken: 86400,
    Grant: 86400,
    Session: 86400,
    Interaction: 600,
  },
});

provider.on('grant.success', (ctx) => {
  const event = { event: 'token', grant_type: ctx.oidc.params?.grant_type ?? null };
  // The PKCE verifier a code was exchanged with: the connect tests look for it, as a
  // canary, in everything sallyport printed, logged or returned.
  if (event.grant_type === 'authorization_code') {
    event.code_verifier = ctx.oidc.params.code_verifier ?? null;
  }
  emit(event);
});
provider.on('grant.error', (ctx, err) => {
  if (err.error_detail === 'refresh token already used') {
    emit({ event: 'reuse_detected', grant_type: ctx.oidc.params?.grant_type ?? null });
  } else {
    emit({ event: 'grant_error', error: err.error ?? null });
  }
});
// oidc-provider 9 emits no `revocation.success`; a token revoked at the revocation endpoint
// revokes its grant, which it reports as `grant.revoked` (once per grant: a second token of
// a grant already revoked is unknown, answered 200 and reports nothing).
provider.on('grant.revoked', (ctx) => {
  if (ctx.oidc.route === 'revocation') emit({ event: 'revoked' });
});
provider.on('server_error', (ctx, err) => {
  process.stderr.write(`server_error: ${err?.stack ?? err}\n`);
});

// Approves every interaction: login as `login_hint` (or alice), then consent to the scopes
// asked for.
async function interaction(req, res) {
  try {
    const details = await provider.interactionDetails(req, res);
    const { prompt, params, session } = details;
    if (params.login_hint === 'refuse') {
      await provider.interactionFinished(req, res, {
        error: 'access_denied',
        error_description: 'The user refused the access\n<b>no</b>',
      }, { mergeWithLastSubmission: false });
      return;
    }
    if (prompt.name === 'login') {
      const accountId = typeof params.login_hint === 'string' ? params.login_hint : 'alice';
      await provider.interactionFinished(req, res, { login: { accountId } }, {
        mergeWithLastSubmission: false,
      });
      return;
    }
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    if (typeof params.scope === 'string') {
      grant.addOIDCScope(params.scope);
    }
    const grantId = await grant.save();
    await provider.interactionFinished(req, res, { consent: { grantId } }, {
      mergeWithLastSubmission: true,
    });
  } catch (err) {
    res.statusCode = 400;
    res.end(`interaction failed: ${err.message}`);
  }
}

const callback = provider.callback();
server.on('request', (req, res) => {
  if (req.url.startsWith('/interaction/')) {
    interaction(req, res);
  } else {
    callback(req, res);
  }
});

emit({ event: 'listening', issuer });
process.on('SIGTERM', () => server.close(() => process.exit(0)));
