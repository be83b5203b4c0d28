@0xd6a1c3e0b8f4a921;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("colony::wire");
# Colony's wire format. Every message between processes is an Envelope: who sent it, for
# which cluster, under which protocol version, and what kind of body it carries.

struct Envelope {
  version @0 :UInt16;     # protocol version; a peer rejects versions it does not speak
  clusterId @1 :UInt64;   # messages for another cluster are dropped
  senderId @2 :UInt64;
  kind @3 :UInt16;        # which message the body holds
  body @4 :Data;
}
