@0xd6a1c3e0b8f4a921;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("colony::wire");
# Colony's wire format. Every message between processes is an Envelope: who sent it, for
# which cluster, under which protocol version, and what it carries: a parameter-server
# message (ps/protocol.h) or an opaque body of another kind.

struct Envelope {
  version @0 :UInt16;     # protocol version; a peer rejects versions it does not speak
  clusterId @1 :UInt64;   # messages for another cluster are dropped
  senderId @2 :UInt64;
  kind @3 :UInt16;        # which message the body holds (0: the ps field holds it)
  body @4 :Data;
  ps @5 :PsMessage;
}

struct Header {
  sender @0 :UInt32;
  requestId @1 :UInt64;
  mapVersion @2 :UInt64;
}

# Floats travel as Data blobs of little-endian IEEE-754 float32, read in place and copied
# out in one piece (no per-element work).
struct PullRequest {
  header @0 :Header;
  clock @1 :UInt32;
  writer @2 :UInt32;
  keys @3 :List(UInt64);
}
struct PullReply {
  header @0 :Header;
  minClock @1 :UInt32;
  values @2 :Data;
}
struct PushRequest {
  header @0 :Header;
  clock @1 :UInt32;
  keys @2 :List(UInt64);
  grads @3 :Data;
}
struct PushAck {
  header @0 :Header;
}
struct ClockAdvance {
  header @0 :Header;
  clock @1 :UInt32;
}
struct ShardMapUpdate {
  header @0 :Header;
  version @1 :UInt64;
  shards @2 :UInt32;
  vnodesPerShard @3 :UInt32;
  seed @4 :UInt64;
}
struct PsError {
  header @0 :Header;
  code @1 :UInt8;
  message @2 :Text;
}

struct PsMessage {
  union {
    none @0 :Void;
    pullRequest @1 :PullRequest;
    pullReply @2 :PullReply;
    pushRequest @3 :PushRequest;
    pushAck @4 :PushAck;
    clockAdvance @5 :ClockAdvance;
    shardMapUpdate @6 :ShardMapUpdate;
    psError @7 :PsError;
  }
}
