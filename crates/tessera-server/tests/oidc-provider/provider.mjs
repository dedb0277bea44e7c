// The OpenID Connect provider the console's sign-in tests start: node-oidc-provider (pinned in
// package-lock.json; `.ci/run` installs it), with its own login page, on 127.0.0.1 and a port
// the system picks. It prints `ready <issuer>` once it listens, and stops when its standard
// input closes (the test ends), so that it never outlives the test.
//
//   node provider.mjs CLIENT_ID CLIENT_SECRET
//
// The client is registered with the redirect URI http://127.0.0.1/console/sign-in/sso/callback
// as a loopback client (RFC 8252 section 7.3), so that any port of the test's server matches.
// Accounts: any login signs in (the development login page takes any password); these
// three carry the claims the tests use, in the ID token (`groups` with the profile scope).
import http from 'node:http';
import Provider from 'oidc-provider';

const [clientId, clientSecret] = process.argv.slice(2);
if (!clientId || !clientSecret) {
  console.error('usage: node provider.mjs CLIENT_ID CLIENT_SECRET');
  process.exit(2);
}

const accounts = {
  ada: { name: 'Ada Lovelace', email: 'ada@example.com', groups: ['tessera-admins', 'staff'] },
  grace: { name: 'Grace Hopper', email: 'grace@example.com', groups: ['tessera-readers'] },
  mallory: { name: 'Mallory', email: 'mallory@example.com', groups: ['sales'] },
};

const server = http.createServer();
server.listen(0, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: [{
      client_id: clientId,
      client_secret: clientSecret,
      application_type: 'native',
      redirect_uris: ['http://127.0.0.1/console/sign-in/sso/callback'],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    }],
    claims: { openid: ['sub'], profile: ['name', 'groups'], email: ['email'] },
    // The claims of the scopes in the ID token itself, not only at the userinfo endpoint.
    conformIdTokenClaims: false,
    findAccount: async (_ctx, id) => ({
      accountId: id,
      claims: async () => ({ sub: id, ...(accounts[id] ?? {}) }),
    }),
    // A first-party client: no consent page.
    loadExistingGrant: async (ctx) => {
      const grantId = ctx.oidc.result?.consent?.grantId
        || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
      if (grantId) {
        return ctx.oidc.provider.Grant.find(grantId);
      }
      const grant = new ctx.oidc.provider.Grant({
        clientId: ctx.oidc.client.clientId,
        accountId: ctx.oidc.session.accountId,
      });
      grant.addOIDCScope('openid profile email');
      await grant.save();
      return grant;
    },
    pkce: { required: () => true },
    cookies: { keys: ['a key for this test provider only'] },
  });
  provider.on('server_error', (_ctx, err) => console.error('provider error:', err));
  server.on('request', provider.callback());
  console.log(`ready ${issuer}`);
});

process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
