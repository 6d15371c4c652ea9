#!/usr/bin/env python3
"""Whole words for the built-in static table (issue 13, 2026-11-28, a negative result).

    engram-bench locomo --embedder builtin --mode hybrid --corpus messages \
        --dump-corpus b.jsonl --dump-hits bh.jsonl
    /tmp/venv/bin/pip install numpy tokenizers onnxruntime onnx wordfreq
    /tmp/venv/bin/python benches/locomo_builtin_vocab.py build 100000   # ~1 min of MiniLM
    /tmp/venv/bin/python benches/locomo_builtin_vocab.py eval b.jsonl bh.jsonl ext_100000.npz 30000,100000

A word that MiniLM's WordPiece vocabulary splits ("pottery" = pot + ##tery) gets the sum
of its pieces' rows, which says little of the word. `build` runs each word of wordfreq's
English top N that is split into pieces through MiniLM (`model.onnx` of
scripts/fetch-model.sh, with its mean-pooled output before normalisation exposed: cosine
0.9999 and the same norm as the committed rows for vocabulary tokens), as the table's own
rows were made ([CLS] pieces [SEP], mean pooling, SIF weight from the word's frequency
rank). `eval` re-embeds LoCoMo's turns with those whole-word rows used in place of the
pieces and fuses as benches/locomo_builtin_candidates.py does.
"""
import sys
import os


def build():
    import collections, time
    import numpy as np, onnxruntime as ort
    import onnx
    from tokenizers import Tokenizer
    from wordfreq import top_n_list
    N=int(sys.argv[2])
    TOK=Tokenizer.from_file('crates/engram-providers/assets/tokenizer.json')
    TOK.no_padding(); TOK.no_truncation()
    vocab=TOK.get_vocab()
    words=top_n_list('en',N)
    ext=[];ranks=[];pieces=[]
    inv={}
    for r,wd in enumerate(words):
        e=TOK.encode(wd,add_special_tokens=False)
        toks=e.tokens
        if len(toks)<2: 
            if len(toks)==1: inv[toks[0]]=r
            continue
        if len(set(i for i in e.word_ids))!=1: continue  # more than one pre-token
        norm=''.join(t[2:] if t.startswith('##') else t for t in toks)
        if norm in vocab or norm in set(ext): continue
        ext.append(norm); ranks.append(r); pieces.append(e.ids)
    # rank map: bert id vs wordfreq rank for vocab words
    pairs=[(r,vocab[t]) for t,r in inv.items() if vocab[t]>=1996 and 5000<=r<=40000]
    ratio=float(np.median([b/r for r,b in pairs]))
    print('ext words',len(ext),'ratio',ratio, file=sys.stderr)
    m=onnx.load(sys.argv[3] if len(sys.argv)>3 else os.path.expanduser('~/.cache/engram/all-MiniLM-L6-v2/model.onnx'))
    m.graph.output.append(onnx.helper.make_tensor_value_info('pool_mean', onnx.TensorProto.FLOAT, ['batch',384]))
    s=ort.InferenceSession(m.SerializeToString())
    by=collections.defaultdict(list)
    for k,p in enumerate(pieces): by[len(p)].append(k)
    raw=np.zeros((len(ext),384),np.float32)
    t=time.time()
    for L,ks in by.items():
        for i in range(0,len(ks),512):
            b=ks[i:i+512]
            ids=np.array([[101]+pieces[k]+[102] for k in b],dtype=np.int64)
            raw[b]=s.run(['pool_mean'],{'input_ids':ids,'attention_mask':np.ones_like(ids)})[0]
    print('onnx',time.time()-t,file=sys.stderr)
    np.savez('ext_%d.npz'%N, words=np.array(ext), ranks=np.array(ranks), raw=raw, ratio=ratio)


def evaluate():
    import re
    import numpy as np
    sys.path.insert(0,'benches')
    import locomo_candidates as L
    import locomo_builtin_candidates as B
    from tokenizers import Tokenizer
    S, qs = L.load(sys.argv[2], sys.argv[3])
    Z=np.load(sys.argv[4])
    TOK=B.TOK; E=B.E
    R=E.shape[0]; H=sum(1/(i+2) for i in range(R))
    def w(rank): p=1/rank/H; return 1e-4/(1e-4+p)
    words=list(Z['words']); ranks=Z['ranks']; raw=Z['raw']; ratio=float(Z['ratio'])
    def make_ext(maxrank, scale=1.0):
        m={}
        rows=[]
        for k,(wd,r) in enumerate(zip(words,ranks)):
            if r>=maxrank: continue
            m[wd]=len(rows); rows.append(raw[k]*w(ratio*r+2)*scale)
        return m, np.array(rows,np.float32)
    cache={}
    def emb(text, ext):
        m,rows=ext
        e=TOK.encode(text,add_special_tokens=False)
        if not e.ids: v=E[0]
        else:
            v=np.zeros(E.shape[1],np.float32)
            toks=e.tokens; wid=e.word_ids; ids=e.ids
            i=0
            while i<len(ids):
                j=i
                while j+1<len(ids) and wid[j+1]==wid[i]: j+=1
                if j>i and m:
                    norm=''.join(t[2:] if t.startswith('##') else t for t in toks[i:j+1])
                    k=m.get(norm)
                    if k is not None:
                        v+=rows[k]; i=j+1; continue
                v+=E[ids[i:j+1]].sum(0); i=j+1
        return v/(np.linalg.norm(v) or 1.0)
    def same_session(s,i,js):
        return [s["content"][j] for j in js if 0<=j<len(s["ids"]) and s["sess"][j]==s["sess"][i]]
    def run(name, ext):
        for s in S.values():
            s['xd']=np.array([emb(B.doc_of(same_session(s,i,range(i-2,i)),c),ext) for i,c in enumerate(s['content'])])
        out=[];vec=[]
        for q in qs:
            s=S[q['sample']]
            u=q['q']
            for n in q['named']: u=re.sub(rf"\b{n}('s)?\b","",u)
            a=emb(q['q'],ext); b=emb(u,ext)
            v=L.unit(0.3*a+0.7*b) if q['named'] else a
            lists=[("vec",L.ranked(s,s['xd']@v)),("text",[d for d,_ in q["text"]]),("date",q["dates"])]
            out.append(B.fuse(s,lists,q['named']))
            vec.append(lists[0][1])
        L.report(name+' fused',qs,out)
        L.report(name+' vectors alone',qs,vec)
    print("| variant | R@1 | R@5 | R@10 | R@20 | R@10 1 | R@10 2 | R@10 3 | R@10 4 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    run('table as committed',({},None))
    for mr in [int(x) for x in sys.argv[5].split(',')]:
        run(f'+ whole words of wordfreq top {mr}', make_ext(mr))


if __name__ == '__main__':
    build() if sys.argv[1] == 'build' else evaluate()
