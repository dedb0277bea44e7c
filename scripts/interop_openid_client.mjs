// The checks of the openid-client snippet of docs/client-kit.md: scripts/interop.sh runs
// the snippet as written with these lines after it, as client TESSERA_CLIENT_ID of the
// Tessera at TESSERA_AUTH_URL (discovery, ClientSecretBasic, client_credentials).
const [a, b] = await Promise.all([token(), token()]);
if (a.split(".").length !== 3) throw new Error(`not a JWT: ${a}`);
// Tessera issues a new token per request on this plan: one token means one request.
if (a !== b) throw new Error("two callers at once sent two requests");
if ((await token()) !== a) throw new Error("a token still good was fetched again");
expiresAt = Date.now() + 29_000; // within 30 s of its end
if ((await token()) === a) throw new Error("a token 29 s from its end was kept");
console.log("interop: ok: openid-client's ClientSecretBasic snippet (docs/client-kit.md)");
