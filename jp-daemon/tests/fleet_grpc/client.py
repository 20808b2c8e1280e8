"""A gRPC client that is not jp's: Python grpcio with stubs generated from proto/jp/v1.

Calls every method of jp.v1.Jp, found from the service descriptor (so a new RPC is
called without editing this file), over the Unix socket given as argv[1], or over
TCP with TLS and a client certificate: `--tls HOST:PORT CA.pem CERT.pem KEY.pem`
(the server's certificate must be valid for "localhost"). Prints one JSON line per
call: {"method", "code", "summary"}. Exits 0 once all were called.
"""
import json
import sys

import grpc
from google.protobuf import json_format

from jp.v1 import jp_pb2, jp_pb2_grpc  # noqa: F401  (jp_pb2 registers the messages)
from google.protobuf import symbol_database

if sys.argv[1] == "--tls":
    address, ca, cert, key = sys.argv[2:6]

    def read(path):
        with open(path, "rb") as f:
            return f.read()

    credentials = grpc.ssl_channel_credentials(
        root_certificates=read(ca), private_key=read(key), certificate_chain=read(cert))
    channel = grpc.secure_channel(
        address, credentials, options=[("grpc.ssl_target_name_override", "localhost")])
else:
    socket = sys.argv[1]
    # grpc-core sends the socket's path as :authority, which is not a valid authority;
    # the h2 crate under tonic resets such streams with PROTOCOL_ERROR (hyperium/h2 pull
    # request 487, open). Every non-Go client of jpd's socket must say "localhost", as
    # grpc-go does by itself (grpcurl: -authority localhost).
    channel = grpc.insecure_channel("unix:" + socket, options=[("grpc.default_authority", "localhost")])
grpc.channel_ready_future(channel).result(timeout=10)
service = jp_pb2.DESCRIPTOR.services_by_name["Jp"]
db = symbol_database.Default()

# A JVM jpd holds, if any, so that the JVM methods are asked about something real.
jvms = jp_pb2_grpc.JpStub(channel).ListJvms(db.GetSymbol("jp.v1.ListJvmsRequest")(), timeout=10).jvms
pid = jvms[0].pid if jvms else 0

for method in service.methods:
    request_class = db.GetSymbol(method.input_type.full_name)
    response_class = db.GetSymbol(method.output_type.full_name)
    request = request_class()
    if "pid" in request_class.DESCRIPTOR.fields_by_name:
        request.pid = pid
    path = "/%s/%s" % (service.full_name, method.name)
    result = {"method": method.name, "pid": pid}
    try:
        if method.server_streaming:
            call = channel.unary_stream(path, request_serializer=request_class.SerializeToString,
                                        response_deserializer=response_class.FromString)(request, timeout=10)
            first = next(iter(call), None)
            call.cancel()
            result["code"] = "OK"
            result["summary"] = json_format.MessageToDict(first) if first is not None else None
        else:
            reply = channel.unary_unary(path, request_serializer=request_class.SerializeToString,
                                        response_deserializer=response_class.FromString)(request, timeout=10)
            result["code"] = "OK"
            result["summary"] = json_format.MessageToDict(reply)
    except grpc.RpcError as e:
        result["code"] = e.code().name
        result["summary"] = e.details()
    print(json.dumps(result), flush=True)
