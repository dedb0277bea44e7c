// The peer of Tessera's token-endpoint benchmark: node-oidc-provider issuing RFC 9068 JWT
// access tokens signed with EdDSA (Ed25519) for the client credentials grant, to clients
// registered statically with client_secret_basic.
//
// Usage: node server.mjs PORT CLIENTS_FILE   (PORT 0: any free port)
//   CLIENTS_FILE holds one JSON object per line with client_id and client_secret, as printed
//   by `tessera client create --json`, so both servers see the same credentials.
// Prints "ready PORT" on stdout once every client is loaded and the port listens.

import { generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';

import Provider from 'oidc-provider';

const [port, clientsFile] = process.argv.slice(2);
if (!port || !clientsFile) {
  console.error('usage: node server.mjs PORT CLIENTS_FILE');
  process.exit(2);
}

const issuer = `http://127.0.0.1:${port}`;
// The same three APIs as Tessera's benchmark plan.
const scope = 'market-data-api news-api oms-api';
// Every token is for one resource server: the default resource of every request.
const resource = 'urn:tessera-bench:apis';

const clients = readFileSync(clientsFile, 'utf8')
  .split('\n')
  .filter((line) => line.trim() !== '')
  .map((line) => {
    const { client_id, client_secret } = JSON.parse(line);
    return {
      client_id,
      client_secret,
      grant_types: ['client_credentials'],
      response_types: [],
      redirect_uris: [],
      token_endpoint_auth_method: 'client_secret_basic',
      scope,
    };
  });

const jwk = generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' });

const provider = new Provider(issuer, {
  clients,
  jwks: { keys: [{ ...jwk, alg: 'EdDSA', use: 'sig' }] },
  // The only key is Ed25519, so every signing default must name it.
  clientDefaults: { id_token_signed_response_alg: 'EdDSA' },
  scopes: scope.split(' '),
  ttl: { ClientCredentials: 3600 },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resource,
      getResourceServerInfo: () => ({
        scope,
        audience: 'market-data-api',
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: 'EdDSA' } },
      }),
    },
  },
});

// Static clients are validated on first use and then cached; load them all before serving,
// as Tessera loads its registry at start, so that the measurement sees neither cold.
for (const { client_id } of clients) {
  if (!(await provider.Client.find(client_id))) {
    console.error(`client ${client_id} did not load`);
    process.exit(1);
  }
}

const server = provider.listen(Number(port), '127.0.0.1', () => {
  console.log(`ready ${server.address().port}`);
});
