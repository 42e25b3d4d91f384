// The bundle imports ELK's worker script as text (build.mjs: `workerAsText`), to start it from a blob: URL.
declare module 'elkjs/lib/elk-worker.min.js' {
  const source: string;
  export default source;
}
