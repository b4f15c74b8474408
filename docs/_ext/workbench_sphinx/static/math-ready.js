// Marks the page once MathJax has typeset it: <html data-math-rendered="N"> with N rendered
// formulas (the browser test waits for this attribute).
window.addEventListener("load", function () {
  var mj = window.MathJax;
  if (!mj || !mj.startup || !mj.startup.promise) {
    document.documentElement.dataset.mathRendered = "0";
    return;
  }
  mj.startup.promise.then(function () {
    document.documentElement.dataset.mathRendered =
      String(document.querySelectorAll("mjx-container").length);
  });
});
