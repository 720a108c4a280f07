// Prepended (--extern-pre-js) to dnnlab_core.mjs: emscripten 3.1.6's ES
// module output still uses `require` and `__dirname` under node, which ES
// modules lack. Browsers and workers skip this.
const dnnlabIsNode = typeof process == 'object' && typeof process.versions == 'object' &&
    typeof process.versions.node == 'string';
const require = dnnlabIsNode ? (await import('module')).createRequire(import.meta.url) : undefined;
const __dirname = dnnlabIsNode ? require('path').dirname(require('url').fileURLToPath(import.meta.url)) : '';
