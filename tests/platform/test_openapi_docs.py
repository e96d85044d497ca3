"""The OpenAPI document as a user reads it, and the page that shows it (docs/operations.md).

Every operation has a summary and a description, every request body an example that is
valid against that operation's own request schema, the token endpoint is described with
its form fields and its OAuth errors, and no text cites the contract's internal sections.
``/agp/docs`` serves Swagger UI from this server only.
"""

import re

import pytest
from jsonschema import Draft202012Validator

METHODS = ("get", "post", "put", "patch", "delete")
INTERNAL_REFERENCE = re.compile(r"\bC\d{1,2}\b|\b[Rr]ule \d|\b[Ii]ssue \d|\b[Cc]heck \d|CONTRACT|\bsession \d")


@pytest.fixture(scope="module")
def document(django_db_blocker):
    from rest_framework.test import APIClient

    with django_db_blocker.unblock():
        response = APIClient().get("/agp/openapi.json")
    assert response.status_code == 200
    return response.json()


def operations(document):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield path, method, operation


def validator_for(document, schema):
    # The request schema refers to the document's components: validate inside the whole document.
    return Draft202012Validator({**schema, "components": document["components"]},
                                format_checker=Draft202012Validator.FORMAT_CHECKER)


def test_every_operation_has_a_summary_and_a_description_for_a_user(document):
    found = list(operations(document))

    assert len(found) >= 63
    for path, method, operation in found:
        name = f"{method.upper()} {path}"
        assert operation.get("summary", "").strip(), f"{name} has no summary"
        assert len(operation["summary"]) <= 60, f"{name}: a summary is a short title"
        description = operation.get("description", "")
        assert len(description) >= 80, f"{name}: description too short: {description!r}"
        assert "``" not in description and "perform_create" not in description, f"{name}: {description!r}"
    summaries = [operation["summary"] for _, _, operation in found]
    assert len(set(summaries)) == len(summaries), "two operations share a summary"


def test_every_request_body_has_an_example_valid_against_its_own_schema(document):
    writes = [operation for _, method, operation in operations(document) if method in ("post", "put", "patch")]
    assert all("requestBody" in operation for operation in writes)
    checked = 0
    for path, method, operation in operations(document):
        body = operation.get("requestBody")
        if body is None:
            continue
        for media_type, content in body["content"].items():
            examples = content.get("examples") or {}
            assert examples, f"{method.upper()} {path} ({media_type}) has no example"
            validator = validator_for(document, content["schema"])
            for name, example in examples.items():
                errors = sorted(validator.iter_errors(example["value"]), key=str)
                assert not errors, f"{method.upper()} {path} example {name}: {[e.message for e in errors]}"
                checked += 1
    assert checked == len(writes) >= 24


def test_an_example_that_breaks_its_schema_is_caught(document):
    content = document["paths"]["/agp/tasks"]["post"]["requestBody"]["content"]["application/json"]
    [example] = content["examples"].values()
    validator = validator_for(document, content["schema"])

    assert validator.is_valid(example["value"])
    assert not validator.is_valid({**example["value"], "risk_level": "extreme"})
    assert not validator.is_valid({key: value for key, value in example["value"].items() if key != "agent_id"})


def test_the_document_cites_no_internal_section(document):
    import json

    text = json.dumps(document)
    assert not INTERNAL_REFERENCE.findall(text), sorted(set(
        text[max(0, m.start() - 60):m.end() + 20] for m in INTERNAL_REFERENCE.finditer(text)))


def test_the_token_endpoint_is_described_with_its_form_fields_and_oauth_errors(document):
    operation = document["paths"]["/oauth/token"]["post"]

    form = operation["requestBody"]["content"]["application/x-www-form-urlencoded"]
    schema = document["components"]["schemas"][form["schema"]["$ref"].rsplit("/", 1)[1]]
    assert set(schema["properties"]) == {"grant_type", "client_id", "client_secret", "scope"}
    assert schema["properties"]["grant_type"]["enum"] == ["client_credentials"]
    assert set(operation["responses"]) == {"200", "400", "401", "411", "413", "429"}
    error_schema = document["components"]["schemas"]["OAuthError"]
    assert {"invalid_request", "invalid_client", "unsupported_grant_type", "invalid_scope"} <= set(
        error_schema["properties"]["error"]["enum"])
    for status in ("400", "401", "429"):
        assert operation["responses"][status]["content"]["application/json"]["schema"]["$ref"].endswith("OAuthError")
    for status in ("411", "413"):  # the body-size middleware answers before the view
        assert operation["responses"][status]["content"]["application/json"]["schema"]["$ref"].endswith(
            "ErrorEnvelope")
    token = document["components"]["schemas"]["TokenResponse"]
    assert set(token["required"]) == {"access_token", "token_type", "expires_in", "scope"}


def test_every_write_documents_the_idempotency_key_and_the_shared_errors(document):
    for path, method, operation in operations(document):
        if not path.startswith("/agp/"):
            continue
        responses = operation["responses"]
        assert {"400", "401", "403", "503"} <= set(responses), f"{method} {path}"
        if method in ("post", "patch"):
            assert "Idempotency-Key" in {p["name"] for p in operation.get("parameters", [])}, f"{method} {path}"
            assert {"409", "411", "413", "415"} <= set(responses)
        error = responses["401"]["content"]["application/json"]["schema"]["$ref"]
        assert error == "#/components/schemas/ErrorEnvelope"


def test_response_schemas_keep_only_the_id_pattern(document):
    schemas = document["components"]["schemas"]
    task = schemas["Task"]["properties"]
    assert task["task_id"]["pattern"] == "^[A-Za-z0-9._:-]{1,128}$"
    assert "pattern" not in schemas["PolicySet"]["properties"]["ruleset_hash"]
    assert schemas["PolicySetRequest"]["properties"]["ruleset_hash"]["pattern"] == "^sha256:[0-9a-f]{64}$"


@pytest.mark.django_db
def test_the_docs_page_serves_swagger_ui_from_this_server_only(api, client):
    page = api.get("/agp/docs")

    assert page.status_code == 200
    assert page["Content-Type"].startswith("text/html")
    html = page.content.decode()
    assert "swagger-ui" in html
    external = [url for url in re.findall(r'(?:src|href)="([^"]+)"', html) if not url.startswith("/")]
    assert external == []
    csp = page["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp and "http" not in csp
    script = api.get("/agp/docs?script")
    assert script.status_code == 200 and "/agp/openapi.json" in script.content.decode()
    for url in re.findall(r'src="(/static/[^"]+)"', html):
        served = client.get(url)
        assert served.status_code == 200, url
        assert b"".join(served.streaming_content) if served.streaming else served.content


@pytest.mark.parametrize("method", ["options", "post", "put", "patch", "delete"])
def test_the_docs_page_answers_other_methods_with_a_405_in_the_error_envelope(api, method):
    response = getattr(api, method)("/agp/docs")

    assert response.status_code == 405, response.content
    assert response.json()["error"]["code"] == "AGP_METHOD_NOT_ALLOWED"
    assert set(response["Allow"].replace(" ", "").split(",")) == {"GET", "HEAD"}
