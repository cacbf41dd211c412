"""Fixtures of the security suite: the end-to-end fixtures of tests/server (a real `kvserve
serve` on a free loopback port, a real redis-server), reused as they are."""
import importlib.util
import os
import sys

_server_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server")
sys.path.insert(0, _server_dir)
_spec = importlib.util.spec_from_file_location("server_fixtures",
                                               os.path.join(_server_dir, "conftest.py"))
server_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(server_fixtures)

Server = server_fixtures.Server
API_KEY = server_fixtures.API_KEY
require_model = server_fixtures.require_model
kvserve_bin = server_fixtures.kvserve_bin
start_server = server_fixtures.start_server
server = server_fixtures.server

from redis_fixture import RedisServer, free_port, redis_server  # noqa: E402,F401
