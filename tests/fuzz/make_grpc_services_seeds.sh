#!/usr/bin/env bash
# Writes the seed corpus of the grpc_services fuzz target (tests/fuzz/corpus/grpc_services/):
# each seed is the method's selector byte (grpc_services_fuzz.cc) followed by the request in
# protobuf wire format, encoded by protoc from the text format below. Run again after changing
# proto/strata.proto or the seeds; the files are committed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${root}/tests/fuzz/corpus/grpc_services
mkdir -p "${out}"

# seed NAME SELECTOR MESSAGE_TYPE TEXT
seed() {
  local name=$1 selector=$2 type=$3 text=$4
  {
    printf "\\x$(printf %02x "${selector}")"
    printf '%s\n' "${text}" | protoc --proto_path="${root}/proto" \
      --encode="strata.v1.${type}" "${root}/proto/strata.proto"
  } >"${out}/${name}"
}

worker='id: "decode-0" role: ROLE_DECODE grpc_address: "127.0.0.1:1" http_address: "127.0.0.1:2"
  model: "tiny-llama" model_identity: "abc" block_size: 8 num_kv_blocks: 64 max_model_len: 512
  kv_layout { dtype: "f32" block_size: 8 num_layers: 2 num_kv_heads: 2 head_dim: 16 memory: "host" }
  device: "cpu:host"'
seed register_decode 0 RegisterRequest "protocol_version: 1 worker { ${worker} }"
seed register_kvstore 0 RegisterRequest \
  'protocol_version: 1 worker { id: "kv-0" role: ROLE_KVSTORE grpc_address: "127.0.0.1:3" }'
seed register_old_version 0 RegisterRequest "protocol_version: 7 worker { ${worker} }"
seed register_no_role 0 RegisterRequest 'protocol_version: 1 worker { id: "x" }'
seed heartbeat 1 HeartbeatRequest 'protocol_version: 1 worker_id: "decode-0" epoch: 1
  load { queued_prefill_tokens: 10 running: 2 waiting: 1 free_kv_blocks: 30 total_kv_blocks: 64
         step_seconds_ema: 0.01 decode_context_tokens: 100 prefill_tokens_per_second: 5000 }
  events { kind: STORED hash: 11 parent_hash: 0 tier: 0 }
  events { kind: STORED hash: 12 parent_hash: 11 tier: 1 }
  events { kind: REMOVED hash: 12 tier: 1 }
  events { kind: CLEARED }'
seed heartbeat_unknown 1 HeartbeatRequest 'protocol_version: 1 worker_id: "nobody" epoch: 9'
seed heartbeat_stalled 1 HeartbeatRequest 'protocol_version: 1 worker_id: "decode-0" epoch: 1
  load { stalled: true stalled_seconds: 12.5 }'
seed deregister 2 DeregisterRequest 'protocol_version: 1 worker_id: "decode-0"'
seed generate 3 GenerateRequest 'protocol_version: 1 request_id: "r1" prompt: [1, 2, 3, 4, 5]
  params { max_tokens: 4 temperature: 0 ignore_eos: true logprobs: -1 }'
seed generate_sampled 3 GenerateRequest 'protocol_version: 1 request_id: "r2" prompt: [7, 8, 9]
  params { max_tokens: 3 temperature: 0.8 top_k: 5 top_p: 0.9 min_p: 0.05 has_seed: true seed: 42
           presence_penalty: 0.5 frequency_penalty: 0.2 repetition_penalty: 1.1 stop: "a"
           stop_token_ids: [3] logprobs: 2 min_tokens: 1 logit_bias { token: 5 bias: -100 }
           cache_salt: "tenant-a" }'
seed generate_guided_json 3 GenerateRequest 'protocol_version: 1 request_id: "r3" prompt: [1, 2]
  params { max_tokens: 8 temperature: 0 logprobs: -1 guided { kind: JSON_OBJECT } }'
seed generate_guided_choice 3 GenerateRequest 'protocol_version: 1 request_id: "r4" prompt: [1]
  params { max_tokens: 8 logprobs: -1 guided { kind: CHOICE spec: "[\"yes\", \"no\"]" } }'
seed generate_guided_regex 3 GenerateRequest 'protocol_version: 1 request_id: "r5" prompt: [1]
  params { max_tokens: 8 logprobs: -1 guided { kind: REGEX spec: "[0-9]{1,3}" } }'
seed generate_resumed 3 GenerateRequest 'protocol_version: 1 request_id: "r6"
  prompt: [1, 2, 3, 4, 5, 6] resumed_tokens: 2 resumed_text_bytes: 3
  params { max_tokens: 4 temperature: 0 logprobs: -1 }'
seed generate_keyed 3 GenerateRequest 'protocol_version: 1 request_id: "r7" prompt: [4, 5, 6]
  params { max_tokens: 4 temperature: 0 logprobs: -1 }
  resume { tenant: "key-1" key: "idem-1:0" fingerprint: 99 }'
seed generate_remote_prefill 3 GenerateRequest 'protocol_version: 1 request_id: "r8"
  prompt: [1, 2, 3] prefill_address: "127.0.0.1:1" params { max_tokens: 4 }'
seed generate_bad_tokens 3 GenerateRequest 'protocol_version: 1 request_id: "r9"
  prompt: [-1, 2147483647, 0] params { max_tokens: 4 }'
seed attach 4 AttachRequest 'protocol_version: 1 resume { tenant: "key-1" key: "idem-1:0" fingerprint: 99 }'
seed attach_unknown 4 AttachRequest 'protocol_version: 1 resume { key: "nothing" }'
seed prefill 5 PrefillRequest 'protocol_version: 1 request_id: "p1" prompt: [1, 2, 3]
  params { max_tokens: 1 } model_identity: "abc"
  destination { agent_name: "decode-0" agent_metadata: "\001\002" region: "\003" block_bytes: 4096
                first_block: 0 dest_blocks: [1, 2]
                layout { dtype: "f32" block_size: 8 num_layers: 2 num_kv_heads: 2 head_dim: 16 } }'
seed abort_prefill 6 AbortPrefillRequest 'protocol_version: 1 request_id: "p1"'
