"""Schemathesis hooks of scripts/conformance.sh: keep the tester from locking itself out.

The tester calls the admin API as the admin client on the plan `admin`. Its stateful phase
feeds names and ids from one answer into the next request, so it would soon replace that
plan's scopes, disable or delete that client, or rotate its secret, and spend the rest of
the run on 401 and 403. Writes aimed at those two go to objects that do not exist instead
(404, or a new plan), so the run keeps its credentials; reads are left alone.

Requests that name an organization or a client of one (issue 28) go, every other time, to
the organization the script made and its client, so that the organization operations are
tested against one that exists, not only answered 404; never a deletion of the
organization itself, which would end that for the rest of the run.
"""

import os

import schemathesis

ADMIN_PLAN = "admin"
ADMIN_CLIENT = os.environ["TESSERA_CONFORMANCE_CLIENT_ID"]
ORG = os.environ["TESSERA_CONFORMANCE_ORG"]
ORG_CLIENT = os.environ["TESSERA_CONFORMANCE_ORG_CLIENT"]
turn = {"n": 0}


@schemathesis.hook
def before_call(context, case, kwargs):
    params = case.path_parameters
    if case.operation.path.startswith("/admin/v1/orgs/{id}") and params:
        turn["n"] += 1
        is_org_deletion = case.method.upper() == "DELETE" and case.operation.path == "/admin/v1/orgs/{id}"
        if turn["n"] % 2 == 0 and not is_org_deletion:
            params["id"] = ORG
            if "client_id" in params:
                params["client_id"] = ORG_CLIENT
        return
    if case.method.upper() == "GET" or not params:
        return
    if params.get("name") == ADMIN_PLAN:
        params["name"] = "conformance-spare"
    if params.get("id") == ADMIN_CLIENT:
        params["id"] = "tc_AAAAAAAAAAAAAAAAAAAAAA"
