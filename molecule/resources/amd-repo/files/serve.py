"""python3 -m http.server, except that hidden paths (.gnupg*, .server.*) are never served."""

import functools
import http.server
import sys


class Handler(http.server.SimpleHTTPRequestHandler):
    def send_head(self):
        if any(part.startswith(".") for part in self.path.split("?")[0].split("/") if part):
            self.send_error(404)
            return None
        return super().send_head()


port, directory = int(sys.argv[1]), sys.argv[2]
http.server.ThreadingHTTPServer.allow_reuse_address = True
http.server.test(
    HandlerClass=functools.partial(Handler, directory=directory),
    ServerClass=http.server.ThreadingHTTPServer,
    port=port,
    bind="0.0.0.0",  # noqa: S104 - containers reach it through their network gateway
)
