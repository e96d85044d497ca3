"""The HTTP floor (``python -m bench``): a WSGI application with no Django behind it.

Served by the same gunicorn command, worker class, workers and threads as the service, and
driven by the same load generator, it answers every request with a fixed JSON body after
reading the request's. Its latency with one client is what gunicorn, loopback and the load
generator cost a request before the service does anything: the part of every scenario's
latency that no change to the service's own code can remove.
"""

BODY = b'{"floor": true}'
HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(BODY)))]


def application(environ, start_response):
    environ["wsgi.input"].read()
    start_response("200 OK", HEADERS)
    return [BODY]
